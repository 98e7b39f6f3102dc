//! An answer's head, parsed: its status, headers, how its body is framed and
//! whether its connection can carry another request.

use http::{HeaderMap, HeaderName, HeaderValue};

/// How an answer's body ends.
pub(super) enum Framing {
    Length(u64),
    Chunked,
}

/// Status, headers, how the body is framed and whether the connection stays
/// open, from a parsed head.
pub(super) fn parse(
    head: &httparse::Response<'_, '_>,
) -> Result<(u16, HeaderMap, Framing, bool), String> {
    let status = head
        .code
        .ok_or_else(|| "an answer with no status".to_owned())?;
    let mut headers = HeaderMap::with_capacity(head.headers.len());
    for h in head.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| format!("a bad header name {:?}", h.name))?;
        let value = HeaderValue::from_bytes(h.value)
            .map_err(|_| format!("a bad value of header {name}"))?;
        headers.append(name, value);
    }
    let success = (200..300).contains(&status);
    let framing = if let Some(te) = headers.get(http::header::TRANSFER_ENCODING) {
        if success || !te.as_bytes().eq_ignore_ascii_case(b"chunked") {
            return Err(format!(
                "a {status} answer with Transfer-Encoding {te:?} (a body is read by its Content-Length)"
            ));
        }
        Framing::Chunked
    } else {
        match headers.get(http::header::CONTENT_LENGTH) {
            Some(v) => Framing::Length(
                v.to_str()
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .ok_or_else(|| format!("a bad Content-Length {v:?}"))?,
            ),
            // No body by definition.
            None if status == 304 || status == 204 || (100..200).contains(&status) => {
                Framing::Length(0)
            }
            None => {
                return Err(format!(
                "a {status} answer with no Content-Length (a body is read by its Content-Length)"
            ))
            }
        }
    };
    let close = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .any(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
    let reusable = head.version == Some(1) && !close;
    Ok((status, headers, framing, reusable))
}
