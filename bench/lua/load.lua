-- One wrk script for every scenario, driven by environment variables:
--   BENCH_METHOD   GET | POST | PUT (default POST)
--   BENCH_PATH     request path; "{n}" -> a unique id, "{k}" -> counter mod BENCH_MOD
--   BENCH_BODY     request body with the same placeholders ("" for none)
--   BENCH_TOKENS   comma-separated bearer tokens, used in turn
--   BENCH_HEADERS  extra headers, "Name: value|Name: value"
--   BENCH_EXPECT   a substring every good answer contains ("" to check the status only)
-- A request counts as good when its status is 2xx and its body contains BENCH_EXPECT.
-- done() prints one line "BENCH_JSON {...}" with counts and latency percentiles (us).

local method = os.getenv("BENCH_METHOD") or "POST"
local path_t = os.getenv("BENCH_PATH") or "/"
local body_t = os.getenv("BENCH_BODY") or ""
local expect = os.getenv("BENCH_EXPECT") or ""
local mod = tonumber(os.getenv("BENCH_MOD") or "1000")

local threads = {}
local next_thread = 0

function setup(thread)
   thread:set("tid", next_thread)
   next_thread = next_thread + 1
   table.insert(threads, thread)
end

local tokens = {}
local headers = {}
local n = 0
bad = 0

function init(args)
   for t in string.gmatch(os.getenv("BENCH_TOKENS") or "", "[^,]+") do
      table.insert(tokens, t)
   end
   headers["Content-Type"] = "application/json"
   for h in string.gmatch(os.getenv("BENCH_HEADERS") or "", "[^|]+") do
      local name, value = string.match(h, "^%s*([^:]+):%s*(.-)%s*$")
      if name then headers[name] = value end
   end
end

local function fill(template, id, k)
   local out = string.gsub(template, "{n}", id)
   out = string.gsub(out, "{k}", k)
   return out
end

function request()
   n = n + 1
   local id = "w" .. tid .. "-" .. n
   local k = tostring(n % mod)
   if #tokens > 0 then
      headers["Authorization"] = "Bearer " .. tokens[(n % #tokens) + 1]
   end
   local body = nil
   if body_t ~= "" then body = fill(body_t, id, k) end
   return wrk.format(method, fill(path_t, id, k), headers, body)
end

function response(status, hdrs, body)
   if status < 200 or status > 299 then
      bad = bad + 1
   elseif expect ~= "" and not string.find(body, expect, 1, true) then
      bad = bad + 1
   end
end

function done(summary, latency, requests)
   local b = 0
   for _, t in ipairs(threads) do b = b + t:get("bad") end
   local e = summary.errors
   io.write(string.format(
      'BENCH_JSON {"requests":%d,"duration_us":%d,"bad":%d,"socket_errors":%d,' ..
      '"timeouts":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,' ..
      '"max_us":%d,"mean_us":%.1f}\n',
      summary.requests, summary.duration, b, e.connect + e.read + e.write, e.timeout,
      latency:percentile(50), latency:percentile(90), latency:percentile(99),
      latency:percentile(99.9), latency.max, latency.mean))
end
