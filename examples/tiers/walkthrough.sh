#!/usr/bin/env bash
# Per-key tiers with Redis, end to end, offline.  Run from the repository root:
#   bash examples/tiers/walkthrough.sh
# Needs redis-server on PATH.  Everything listens on 127.0.0.1 and is stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."

export PROTEUS_REDIS_URL="redis://127.0.0.1:6390/0"
export PROTEUS_KEYS_FILE="examples/tiers/keys.yaml"
export LITELLM_MASTER_KEY="sk-$(openssl rand -hex 16)"
export LITELLM_LOCAL_MODEL_COST_MAP=True
PORT=4010

redis-server --port 6390 --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
REDIS_PID=$!
litellm --config examples/tiers/config.yaml --host 127.0.0.1 --port "$PORT" >/tmp/proteus-walkthrough.log 2>&1 &
PROXY_PID=$!
trap 'kill "$PROXY_PID" "$REDIS_PID" 2>/dev/null || true' EXIT

echo "waiting for the proxy (log: /tmp/proteus-walkthrough.log) ..."
for _ in $(seq 1 180); do
  curl -sf "http://127.0.0.1:$PORT/health/liveliness" >/dev/null && break
  kill -0 "$PROXY_PID" 2>/dev/null || { tail -20 /tmp/proteus-walkthrough.log; exit 1; }
  sleep 1
done

# 1. Give carol a tier in Redis (raw keys are hashed the way LiteLLM hashes them).
proteus tiers --config examples/tiers/config.yaml set sk-carol economy
proteus tiers --config examples/tiers/config.yaml list
proteus tiers --config examples/tiers/config.yaml set sk-carol gold || echo "(unknown tiers are refused)"

ask() {  # ask KEY [TAU]
  local meta=""
  [ $# -ge 2 ] && meta=", \"metadata\": {\"tau\": $2}"
  echo "--- key $1 ${2:+tau=$2}"
  curl -s -D - -o /dev/null "http://127.0.0.1:$PORT/v1/chat/completions" \
    -H "Authorization: Bearer $1" -H 'content-type: application/json' \
    -d "{\"model\": \"proteus-auto\", \"messages\": [{\"role\": \"user\", \"content\": \"Prove that sqrt(2) is irrational.\"}]$meta}" \
    | grep -i '^x-proteus-'
}

ask sk-alice-premium            # premium from key metadata
ask sk-bob-research             # economy from team metadata
ask sk-carol                    # economy from Redis
ask sk-carol 0.95               # above its tier: capped (x-proteus-tau-capped: true)
ask sk-alice-premium 0.95       # premium may raise (allow_raise), clamped to the trained range
ask sk-dave                     # the default tier

# 2. Redis goes away: requests are still served; a key keeps the tier it was last seen with
#    (stale-if-error), a key never seen gets the default tier, and the log says so once.
kill "$REDIS_PID"; sleep 6      # > cache_ttl_s
ask sk-carol
grep -m1 "tier lookup failed" /tmp/proteus-walkthrough.log || true
