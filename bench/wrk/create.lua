-- wrk script: POST /v1/alarms with a unique business_id per request.
-- Arguments: application [min_delay_ms max_delay_ms] (default: due in one hour).
local counter = 0
local thread_id = 0
local threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  thread_id = tid
  application = args[1] or "wrkbench"
  min_delay = tonumber(args[2] or "3600000")
  max_delay = tonumber(args[3] or "3600000")
  math.randomseed(thread_id)
end

request = function()
  counter = counter + 1
  local body = string.format(
    '{"application":"%s","business_id":"w%d-%d","payload":"%s","delay_ms":%d}',
    application, thread_id, counter, string.rep("x", 64), math.random(min_delay, max_delay))
  return wrk.format("POST", "/v1/alarms", {["Content-Type"] = "application/json"}, body)
end

local statuses = {}
response = function(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

done = function(summary, latency, requests)
  io.write(string.format("JSON {\"requests\":%d,\"duration_us\":%d,\"errors_status\":%d," ..
    "\"errors_connect\":%d,\"errors_timeout\":%d,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f}\n",
    summary.requests, summary.duration, summary.errors.status, summary.errors.connect,
    summary.errors.timeout, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    latency.max / 1000))
end
