"""Lua scripts of `RedisLimiter`: each runs atomically inside Redis, so N replicas share exact
counters. Time comes from Redis (``TIME``), never from the replicas' clocks.

Per scope the keys are: requests zset (member → admit time), tokens zset (member → time),
tokens hash (member → tokens, ``__total``), parallel zset (member → lease expiry), spend string.
A scope touches only the keys of the limits it has (a key without a TPM limit keeps no token
log), so a check costs Redis only what it enforces.

RESERVE  KEYS: 5 per scope.  ARGV: member, tokens, n, window_ms, lease_ms, then per scope
         rpm, tpm, max_parallel, budget_nusd (-1: unlimited), period_end_ms.
         Returns {1, scope index, reason 1..4, retry_after_ms} or {0, then per scope
         remaining requests, remaining tokens (-1: unlimited), reset requests ms, reset tokens ms}.
RAISE_SPEND  KEYS: spend.  ARGV: nusd, ttl_ms.  Sets the counter to at least nusd.
SETTLE   KEYS: as RESERVE.  ARGV: member, tokens, cost_nusd, n, then per scope
         budgeted (0/1), spend key expiry (unix ms).  Returns per scope the spend after the
         increment, or -1 for a scope without a budget.
"""

from __future__ import annotations

__all__ = ["KEYS_PER_SCOPE", "RAISE_SPEND", "RESERVE", "SETTLE"]

KEYS_PER_SCOPE = 5

RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local member, tokens, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local window, lease = tonumber(ARGV[4]), tonumber(ARGV[5])
local edge = now - window
local out = {0}
local crowded = false
for i = 0, n - 1 do
  local rq, tk, th, par, sp = KEYS[i*5+1], KEYS[i*5+2], KEYS[i*5+3], KEYS[i*5+4], KEYS[i*5+5]
  local a = 5 + i * 5
  local rpm, tpm, mp = tonumber(ARGV[a+1]), tonumber(ARGV[a+2]), tonumber(ARGV[a+3])
  local budget, period_end = tonumber(ARGV[a+4]), tonumber(ARGV[a+5])
  local rem_rq, rem_tk, reset_rq, reset_tk = -1, -1, window, window
  if rpm >= 0 then
    redis.call('ZREMRANGEBYSCORE', rq, '-inf', edge)
    local used = redis.call('ZCARD', rq)
    if used > 0 then
      reset_rq = tonumber(redis.call('ZRANGE', rq, 0, 0, 'WITHSCORES')[2]) + window - now
    end
    if used + 1 > rpm then return {1, i, 1, math.max(reset_rq, 1)} end
    rem_rq = rpm - used - 1
  end
  if tpm >= 0 then
    local old = redis.call('ZRANGEBYSCORE', tk, '-inf', edge)
    if #old > 0 then
      local vals = redis.call('HMGET', th, unpack(old))
      local freed = 0
      for j = 1, #vals do freed = freed + (tonumber(vals[j]) or 0) end
      redis.call('ZREMRANGEBYSCORE', tk, '-inf', edge)
      redis.call('HDEL', th, unpack(old))
      redis.call('HINCRBY', th, '__total', -freed)
    end
    local used = tonumber(redis.call('HGET', th, '__total') or '0')
    local first = redis.call('ZRANGE', tk, 0, 0, 'WITHSCORES')
    if #first > 0 then reset_tk = tonumber(first[2]) + window - now end
    if used + tokens > tpm then return {1, i, 2, math.max(reset_tk, 1)} end
    rem_tk = tpm - used - tokens
  end
  if mp >= 0 then
    redis.call('ZREMRANGEBYSCORE', par, '-inf', now)
    local inuse = redis.call('ZCARD', par)
    if inuse >= mp then return {1, i, 3, 1000} end
    if (inuse + 1) * 2 > mp then crowded = true end
  end
  if budget >= 0 and tonumber(redis.call('GET', sp) or '0') >= budget then
    return {1, i, 4, math.max(period_end - now, 1000)}
  end
  table.insert(out, rem_rq)
  table.insert(out, rem_tk)
  table.insert(out, reset_rq)
  table.insert(out, reset_tk)
end
for i = 0, n - 1 do
  local rq, tk, th, par = KEYS[i*5+1], KEYS[i*5+2], KEYS[i*5+3], KEYS[i*5+4]
  local a = 5 + i * 5
  if tonumber(ARGV[a+1]) >= 0 then
    redis.call('ZADD', rq, now, member)
    redis.call('PEXPIRE', rq, window + 1000)
  end
  if tonumber(ARGV[a+2]) >= 0 then
    redis.call('ZADD', tk, now, member)
    redis.call('HSET', th, member, tokens)
    redis.call('HINCRBY', th, '__total', tokens)
    redis.call('PEXPIRE', tk, window + 1000)
    redis.call('PEXPIRE', th, window + 1000)
  end
  if tonumber(ARGV[a+3]) >= 0 then
    redis.call('ZADD', par, now + lease, member)
    redis.call('PEXPIRE', par, lease + 1000)
  end
end
if crowded then out[1] = 2 end
return out
"""

SETTLE = """
local member, tokens, cost, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {}
for i = 0, n - 1 do
  local tk, th, par, sp = KEYS[i*5+2], KEYS[i*5+3], KEYS[i*5+4], KEYS[i*5+5]
  local budgeted, expire_at = tonumber(ARGV[5 + i*2]), tonumber(ARGV[6 + i*2])
  redis.call('ZREM', par, member)
  local held = redis.call('HGET', th, member)
  if held and redis.call('ZSCORE', tk, member) then
    redis.call('HSET', th, member, tokens)
    redis.call('HINCRBY', th, '__total', tokens - tonumber(held))
  end
  if budgeted == 1 then
    local total = redis.call('INCRBY', sp, cost)
    redis.call('PEXPIREAT', sp, expire_at)
    table.insert(out, total)
  else
    table.insert(out, -1)
  end
end
return out
"""

RAISE_SPEND = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(ARGV[1])
if floor > current then
  redis.call('SET', KEYS[1], floor, 'PX', tonumber(ARGV[2]))
  return floor
end
return current
"""
