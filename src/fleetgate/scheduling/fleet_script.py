"""The Lua script of a fleet's sync: one atomic step per pool and process (`fleet.Fleet`).

KEYS: the pool's leases (hash process -> ``"lease,want"``), its live processes (sorted set
process -> expiry in Redis's own milliseconds), their published status (hash process ->
JSON), the fair-share counters (hash team -> tokens), this process's preemption orders (list)
and the orders of the process it sends one to (list; this process's own when none).

ARGV: process id, lease TTL (ms), the pool's limit (-1: unbounded), the slots wanted, the slots
held while this call is in flight (never taken back), the status JSON, an order JSON ('' for
none), the number of fair-share counters, then per counter its team and the delta to add.

Steps: drop the processes whose TTL passed (their leases return to the pool); renew this one;
grant ``min(want, limit - the others' leases)``, at contention (the wants add up past the
limit) at most the max-min fair level of the wants, never less than ``hold`` (capped at what
Redis says this process holds: after a Redis restart, nothing); publish the status; add the
counters' deltas; queue the order; take this process's orders.

Returns ``{grant, fair level (-1: no contention), the others' statuses (flat: id, JSON, ...),
the counters asked for (strings, false for none), this process's orders, the leases before
this step (flat: id, "lease,want", ...)}``. Every loop runs
over the live processes, the counters sent or the orders queued: all bounded.
"""

from __future__ import annotations

__all__ = ["SYNC"]

SYNC = """
local leases, seen, info, vtc, mine, target = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local me = ARGV[1]
local ttl = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local hold = tonumber(ARGV[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local dead = redis.call('ZRANGEBYSCORE', seen, '-inf', now)
for _, p in ipairs(dead) do
  redis.call('HDEL', leases, p)
  redis.call('HDEL', info, p)
end
if #dead > 0 then redis.call('ZREMRANGEBYSCORE', seen, '-inf', now) end
redis.call('ZADD', seen, now + ttl, me)

local current, others, total = 0, 0, want
local wants = {want}
local all = redis.call('HGETALL', leases)
for i = 1, #all, 2 do
  local l, w = string.match(all[i + 1], '^(%d+),(%d+)$')
  l, w = tonumber(l), tonumber(w)
  if all[i] == me then
    current = l
  else
    others = others + l
    total = total + w
    wants[#wants + 1] = w
  end
end

local grant, fair = want, -1
if limit >= 0 then
  if grant > limit - others then grant = limit - others end
  if total > limit then
    table.sort(wants)
    local left, n = limit, #wants
    local level = limit
    for i, w in ipairs(wants) do
      local share = left / (n - i + 1)
      if w >= share then level = share break end
      left = left - w
    end
    fair = math.ceil(level)
    if grant > fair then grant = fair end
  end
  if hold > current then hold = current end
  if grant < hold then grant = hold end
  if grant < 0 then grant = 0 end
end
redis.call('HSET', leases, me, grant .. ',' .. want)
redis.call('HSET', info, me, ARGV[6])

local counted = {}
local n = tonumber(ARGV[8])
for i = 0, n - 1 do
  local team, delta = ARGV[9 + 2 * i], tonumber(ARGV[10 + 2 * i])
  if delta ~= 0 then
    counted[i + 1] = redis.call('HINCRBYFLOAT', vtc, team, delta)
  else
    counted[i + 1] = redis.call('HGET', vtc, team)
  end
end

if ARGV[7] ~= '' then
  redis.call('RPUSH', target, ARGV[7])
  redis.call('PEXPIRE', target, ttl)
end
local orders = redis.call('LRANGE', mine, 0, 63)
if #orders > 0 then redis.call('DEL', mine) end

local statuses = {}
local infos = redis.call('HGETALL', info)
for i = 1, #infos, 2 do
  if infos[i] ~= me then
    statuses[#statuses + 1] = infos[i]
    statuses[#statuses + 1] = infos[i + 1]
  end
end
for _, k in ipairs({leases, seen, info}) do redis.call('PEXPIRE', k, ttl * 10) end
redis.call('PEXPIRE', vtc, 86400000)
return {grant, fair, statuses, counted, orders, all}
"""
