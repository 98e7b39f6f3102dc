//! What the budget counts, per class: requests let go, bytes charged, requests
//! that had to wait and for how long; and the throttles the origin answered.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Class;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    pub class: &'static str,
}

#[derive(Clone, Default, Debug)]
pub struct BudgetMetrics {
    pub requests: Family<ClassLabel, Counter>,
    pub bytes: Family<ClassLabel, Counter>,
    pub waits: Family<ClassLabel, Counter>,
    pub wait_seconds: Family<ClassLabel, Counter<f64>>,
    pub throttles: Counter,
    pub decreases: Counter,
    /// The concurrency and request rate throttling allows now (0: unbounded).
    pub window: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub rate: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl BudgetMetrics {
    pub(super) fn label(class: Class) -> ClassLabel {
        ClassLabel {
            class: class.as_str(),
        }
    }

    /// Registers the series under `prefix` (`shoal_node_origin_budget`, say).
    pub fn register(&self, r: &mut Registry) {
        // Every class is a series from the start: a dashboard (or a test) sees 0,
        // not a missing series, for a class that has sent nothing yet.
        for c in Class::ALL {
            let l = Self::label(c);
            drop(self.requests.get_or_create(&l));
            drop(self.bytes.get_or_create(&l));
            drop(self.waits.get_or_create(&l));
            drop(self.wait_seconds.get_or_create(&l));
        }
        crate::register_metrics!(r,
            "requests" => self.requests, "Requests let go to the origin, by class";
            "bytes" => self.bytes, "Bytes asked of the origin, by class";
            "waits" => self.waits, "Requests that waited for the budget, by class";
            "wait_seconds" => self.wait_seconds, "Time requests waited for the budget, by class";
            "throttles" => self.throttles, "Answers throttling a request (503 SlowDown, 429)";
            "decreases" => self.decreases, "Times throttling shrank the concurrency and request rate";
            "throttled_concurrency" => self.window, "Requests at once throttling allows now (0: unbounded)";
            "throttled_rate" => self.rate, "Requests a second throttling allows now (0: unbounded)";
        );
    }
}
