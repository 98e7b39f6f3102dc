#!/usr/bin/env bash
# RAM-hit throughput of one shoal-node serving 1 MiB ranges to 8 concurrent
# clients, against nginx as a slice-caching proxy (slice 1m, proxy_cache_lock on)
# in front of the same origin, both warm, and against reading the origin directly.
# Everything runs on this machine in one run; the ratios are what to read.
source "$(dirname "$0")/lib.sh"
SIZE_MB=${SIZE_MB:-256}
SECONDS_EACH=${SECONDS_EACH:-5}
CONC=${CONC:-8}

command -v nginx >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null; }
build
mkdir -p "$work/seed"
head -c "${SIZE_MB}M" /dev/urandom >"$work/seed/obj.bin"
size=$((SIZE_MB * 1024 * 1024))
start_origin "$work/seed"
start_node n1

nport=$(free_port)
mkdir -p "$work/nginx/cache"
cat >"$work/nginx/nginx.conf" <<CONF
user root;
worker_processes 2;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  proxy_cache_path $work/nginx/cache levels=1:2 keys_zone=shoal:32m max_size=4g inactive=1h use_temp_path=off;
  upstream origin { server $origin; keepalive 32; }
  server {
    listen 127.0.0.1:$nport;
    location / {
      slice 1m;
      proxy_cache shoal;
      proxy_cache_key \$uri\$slice_range;
      proxy_set_header Range \$slice_range;
      # The client signed for this Host; Range is outside the signature.
      proxy_set_header Host \$http_host;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache_valid 200 206 1h;
      proxy_cache_lock on;
      proxy_pass http://origin;
    }
  }
}
CONF
nginx -c "$work/nginx/nginx.conf" -g 'daemon off;' &
pids+=($!)
sleep 0.5

flags=(--concurrency "$CONC" --seconds "$SECONDS_EACH" --warm)
o=$(LOAD_KEY=$ORIGIN_KEY LOAD_SECRET=$SHOAL_ORIGIN_SECRET_KEY load "$origin" obj.bin "$size" "${flags[@]}")
n=$(load "$node" obj.bin "$size" "${flags[@]}")
g=$(LOAD_KEY=$ORIGIN_KEY LOAD_SECRET=$SHOAL_ORIGIN_SECRET_KEY load "127.0.0.1:$nport" obj.bin "$size" "${flags[@]}")

echo "node: warm 1 MiB ranged GETs, $CONC clients, ${SIZE_MB} MiB object, ${SECONDS_EACH}s each"
printf '%-34s %10s %10s\n' "target" "MB/s" "shoal/x"
printf '%-34s %10s %10s\n' "shoal-node (RAM hits)" "$n" "1.00"
printf '%-34s %10s %10s\n' "nginx slice cache (warm)" "$g" "$(ratio "$n" "$g")"
printf '%-34s %10s %10s\n' "origin direct (in-memory s3s)" "$o" "$(ratio "$n" "$o")"
