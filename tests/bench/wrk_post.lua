-- wrk script of tests/bench/run.sh: POSTs one chat completion body and, at
-- the end, prints one machine-readable line:
--   WRK requests=N rps=R p50_us=X p99_us=Y errors=E non2xx=M
-- BENCH_PROMPT_BYTES (environment) sets the prompt's size; default a few words.
-- BENCH_STREAM_TOKENS (environment) asks for a stream of that many tokens
-- instead of a 2-token answer.
local bytes = tonumber(os.getenv("BENCH_PROMPT_BYTES") or "0")
local prompt = "Say hello to the router benchmark."
if bytes > 0 then
    prompt = string.rep("abc ", math.floor(bytes / 4))
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local stream_tokens = tonumber(os.getenv("BENCH_STREAM_TOKENS") or "0")
local tail = '"}],"max_tokens":2,"stream":false}'
if stream_tokens > 0 then
    tail = '"}],"max_tokens":' .. stream_tokens .. ',"stream":true}'
end
wrk.body = '{"model":"mock","messages":[{"role":"user","content":"' .. prompt .. tail

function done(summary, latency, requests)
    local secs = summary.duration / 1e6
    local e = summary.errors
    io.write(string.format("WRK requests=%d rps=%.1f p50_us=%.1f p99_us=%.1f errors=%d non2xx=%d\n",
        summary.requests, summary.requests / secs, latency:percentile(50.0),
        latency:percentile(99.0), e.connect + e.read + e.write + e.timeout, e.status))
end
