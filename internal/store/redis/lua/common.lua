-- common.lua: the prelude of every sluice script. It reads the time and
-- defines the helpers; each script's body follows it.
--
-- ARGV[1] and ARGV[2] are now as Unix seconds and nanoseconds, or ARGV[1] is
-- empty and Redis TIME is used, so that every host sharing the server agrees.
--
-- Lua numbers are doubles: integers are exact only below 2^53, which Unix
-- nanoseconds exceed. Times are therefore kept in Redis as decimal strings of
-- Unix nanoseconds and handled here as nanoseconds relative to now (exact
-- within 104 days of now); lease expiries are sorted-set scores in Unix
-- microseconds (exact until the year 2255).
local nowS, nowN
if ARGV[1] == '' then
  local t = redis.call('TIME')
  nowS = tonumber(t[1])
  nowN = tonumber(t[2]) * 1000
else
  nowS = tonumber(ARGV[1])
  nowN = tonumber(ARGV[2])
end
local nowUs = nowS * 1000000 + math.floor(nowN / 1000)
local NEVER = -1
local MAXINT = 9.2e18
local MAXEXACT = 1000000
local WANT = {a = 'hash', e = 'list', s = 'string', l = 'zset'}

-- rel turns a stored time into nanoseconds relative to now.
local function rel(s)
  local l = #s
  if l > 9 then
    return (tonumber(string.sub(s, 1, l - 9)) - nowS) * 1e9 + (tonumber(string.sub(s, l - 8)) - nowN)
  end
  return -nowS * 1e9 + (tonumber(s) - nowN)
end

-- abs turns nanoseconds relative to now into a stored time.
local function abs(r)
  local t = nowN + r
  local q = math.floor(t / 1e9)
  local ns = t - q * 1e9
  if ns < 0 then
    q, ns = q - 1, ns + 1e9
  elseif ns >= 1e9 then
    q, ns = q + 1, ns - 1e9
  end
  return string.format('%d%09d', nowS + q, ns)
end

-- An exact log marks a reservation by the lowest bit of its time (an odd
-- last digit), as limiter.State does.
local function odd(s) return string.byte(s, -1) % 2 == 1 end
local function flagged(s)
  if odd(s) then return s end
  return string.sub(s, 1, -2) .. string.char(string.byte(s, -1) + 1)
end
-- hitRel is rel of the time with the reservation bit cleared.
local function hitRel(s)
  if odd(s) then return rel(s) - 1 end
  return rel(s)
end

local function int(x)
  if x > MAXINT then return MAXINT end
  if x < -MAXINT then return -MAXINT end
  return x
end

local function ceilDiv(a, b)
  if a <= 0 then return 0 end
  return math.ceil(a / b)
end

-- kind reports whether key k holds nothing ('none'), the Redis type of the
-- state wanted ('same') or another ('other': state of another algorithm or
-- kind, which the writing scripts drop, as store/memory does).
local function kind(k, want)
  local t = redis.call('TYPE', k)
  if type(t) == 'table' then t = t.ok end
  if t == 'none' then return 'none' end
  if t == want then return 'same' end
  return 'other'
end

-- expireIn keeps k for ns more nanoseconds, or drops it now.
local function expireIn(k, ns)
  if ns <= 0 then
    redis.call('DEL', k)
  else
    redis.call('PEXPIRE', k, string.format('%d', math.ceil(ns / 1e6)))
  end
end

-- keysDelta is how many of the keys in seen (key -> existed before) were
-- created by this script, less those it dropped; the store keeps Len with it.
local function keysDelta(seen)
  local d = 0
  for k, was in pairs(seen) do
    local is = redis.call('EXISTS', k) == 1
    if is and not was then d = d + 1 elseif was and not is then d = d - 1 end
  end
  return d
end

---------------------------------------------------------------- anvil
-- An Anvil key is a hash: t = window start (Unix seconds), '0'..'7' the
-- counters sharing that window.

local function anvilRead(k, ctr, present)
  if not present then return 0, 0 end
  local v = redis.call('HMGET', k, 't', ctr)
  return tonumber(v[1]) or 0, tonumber(v[2]) or 0
end

local function anvilStale(T, Ps) return T == 0 or T + Ps < nowS end

local function anvilDecide(T, cnt, N, Ps, n)
  local cur, endS = cnt, T + Ps + 1
  if anvilStale(T, Ps) then cur, endS = 0, nowS + Ps + 1 end
  local reset = (endS - nowS) * 1e9 - nowN
  if cur + n <= N then return {true, cur + n, N - cur - n, 0, reset} end
  local retry = reset
  if n > N then retry = NEVER end
  return {false, cur, math.max(N - cur, 0), retry, reset}
end

-- anvilRecord adds n to a counter and returns its new value.
local function anvilRecord(k, ctr, Ps, n, present)
  local T, cnt = anvilRead(k, ctr, present)
  if anvilStale(T, Ps) then
    if present then redis.call('DEL', k) end
    T, cnt = nowS, 0
    redis.call('HSET', k, 't', string.format('%d', T))
  end
  local v = math.min(cnt + n, 2147483647)
  redis.call('HSET', k, ctr, string.format('%d', v))
  expireIn(k, (T + Ps + 1 - nowS) * 1e9 - nowN)
  return v
end

---------------------------------------------------------------- exact
-- An Exact key is a list of event times, oldest first, never decreasing.
-- st describes it: entries before st.start are stale (at or before
-- now - period), st.n entries are live, st.total is the list's length.

local function exactLog(k, P, present)
  local st = {k = k, start = 0, n = 0, total = 0}
  if not present then return st end
  local total = redis.call('LLEN', k)
  st.total = total
  if total == 0 then return st end
  local function at(i)
    if i * 2 > total then i = i - total end
    return redis.call('LINDEX', k, i)
  end
  if rel(at(0)) <= -P then
    local a, b = 0, total -- at(a) is stale; the first live one is in (a, b]
    while b - a > 1 do
      local m = math.floor((a + b) / 2)
      if rel(at(m)) <= -P then a = m else b = m end
    end
    st.start = b
  end
  st.n = total - st.start
  return st
end

-- entry returns live entry i (0: the oldest), reading from the nearer end.
local function entry(st, i)
  local j = st.start + i
  if j * 2 > st.total then j = j - st.total end
  return redis.call('LINDEX', st.k, j)
end

local function trimStale(st)
  if st.start > 0 then
    if st.n == 0 then
      redis.call('DEL', st.k)
    else
      redis.call('LTRIM', st.k, st.start, -1)
    end
    st.total, st.start = st.n, 0
  end
end

local function push(k, v, m)
  local batch = {}
  for i = 1, math.min(m, 512) do batch[i] = v end
  while m > 0 do
    for i = m + 1, #batch do batch[i] = nil end
    redis.call('RPUSH', k, unpack(batch))
    m = m - #batch
  end
end

-- hitTime is when a hit made now is recorded: now (reservation bit clear),
-- or the newest hit if a caller with a later clock got there first.
local function hitTime(st)
  local t = -(nowN % 2)
  local i = st.n
  while i > 0 do
    local from = math.max(i - 32, 0)
    local c = redis.call('LRANGE', st.k, st.start + from, st.start + i - 1)
    for j = #c, 1, -1 do
      if not odd(c[j]) then
        local e = rel(c[j])
        if e > t then t = e end
        return t
      end
    end
    i = from
  end
  return t
end

-- earliest is the first time at or after base when n more events keep at
-- most N in every period, or nil if never.
local function earliest(st, base, N, n, P)
  if n > N then return nil end
  local t = base
  if st.n == 0 then return t end
  local last = hitRel(entry(st, st.n - 1))
  if last > t then t = last end
  local k = st.n - (N - n + 1)
  if k >= 0 then
    local e = hitRel(entry(st, k)) + P
    if e > t then t = e end
  end
  return t
end

local function exactDecide(st, N, P, n)
  local base = hitTime(st)
  local at = earliest(st, base, N, n, P)
  local held = st.n
  local ok = at ~= nil and at <= base
  local count = held
  if ok then count = count + n end
  local reset = 0
  if held > 0 then reset = rel(entry(st, held - 1)) + P end
  local retry = 0
  if not ok then
    if at == nil then retry = NEVER else retry = at - base end
  end
  return {ok, count, math.max(N - count, 0), retry, reset}
end

-- exactRecord adds n events now to a trimmed log.
local function exactRecord(st, N, P, n)
  local t = hitTime(st)
  local last
  if st.n > 0 then
    last = entry(st, st.n - 1)
    local lr = rel(last)
    if lr > t then t = lr + 1 end -- after a booked slot (Strict only)
  end
  local m = math.min(n, N)
  if m > 0 then
    last = abs(t)
    push(st.k, last, m)
  end
  if last == nil then return end
  local lr = rel(last)
  if not odd(last) or lr <= 0 then
    -- Strict counting of a flood keeps at most 4N events.
    local keep = math.min(4 * N, MAXEXACT)
    if redis.call('LLEN', st.k) > keep then redis.call('LTRIM', st.k, -keep, -1) end
  end
  expireIn(st.k, lr + P)
end

-- expireExact sets an exact log's TTL from its newest event.
local function expireExact(k, P)
  local last = redis.call('LINDEX', k, -1)
  if last then expireIn(k, rel(last) + P) end
end

---------------------------------------------------------------- smooth
-- A Smooth key is a string: the theoretical arrival time (GCRA).

local function smoothRead(k, present)
  if not present then return nil end
  local v = redis.call('GET', k)
  if not v then return nil end
  return rel(v)
end

local function smoothDecide(T, iv, b, n)
  local tat = 0
  if T and T > 0 then tat = T end
  local newTat = tat + n * iv
  local allowAt = newTat - b * iv
  if allowAt <= 0 then
    local c = ceilDiv(newTat, iv)
    return {true, c, math.max(b - c, 0), 0, newTat}
  end
  local c = ceilDiv(tat, iv)
  local retry = allowAt
  if n > b then retry = NEVER end
  return {false, c, math.max(b - c, 0), retry, tat}
end

-- smoothSet stores a theoretical arrival time (relative), or drops the key
-- when the bucket is empty.
local function smoothSet(k, tat)
  if tat <= 0 then
    redis.call('DEL', k)
  else
    redis.call('SET', k, abs(tat), 'PX', string.format('%d', math.ceil(tat / 1e6)))
  end
end

local function smoothRecord(k, T, iv, b, P, n)
  local tat = 0
  if T and T > 0 then tat = T end
  tat = tat + n * iv
  -- Strict counting may push the bucket past full; cap the debt at one
  -- period beyond a full bucket so a stopped client recovers.
  local ceiling = b * iv + P
  if tat > ceiling then tat = ceiling end
  smoothSet(k, tat)
  return tat
end

---------------------------------------------------------------- leases
-- A lease key is a sorted set: member "id@owner", score its expiry in Unix
-- microseconds. The key lives as long as its longest lease.

local function expireLeases(k)
  local top = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
  if top[2] then expireIn(k, (tonumber(top[2]) - nowUs) * 1000) end
end

local function fmtUs(x) return string.format('%d', x) end

---------------------------------------------------------------- rate checks
-- The rate scripts (hit, peek, undo) take after their own arguments six per
-- check: algorithm (a, e, s), N, period in ns, x (anvil: period in seconds;
-- smooth: interval in ns), burst, counter.

local function readChecks(first)
  local cs = {}
  for i = 1, #KEYS do
    local o = first + (i - 1) * 6
    cs[i] = {
      k = KEYS[i], algo = ARGV[o], N = tonumber(ARGV[o + 1]), P = tonumber(ARGV[o + 2]),
      x = tonumber(ARGV[o + 3]), b = tonumber(ARGV[o + 4]), ctr = ARGV[o + 5],
    }
  end
  return cs
end

-- decide returns check c's decision on the current state. With trim, an
-- exact log's stale events are dropped on the way (invisible to callers).
local function decide(c, n, present, trim)
  if c.algo == 'a' then
    local T, cnt = anvilRead(c.k, c.ctr, present)
    return anvilDecide(T, cnt, c.N, c.x, n)
  elseif c.algo == 'e' then
    local st = exactLog(c.k, c.P, present)
    if trim then trimStale(st) end
    return exactDecide(st, c.N, c.P, n)
  end
  return smoothDecide(smoothRead(c.k, present), c.x, c.b, n)
end

-- reply flattens decisions after a header.
local function reply(head, ds)
  for _, d in ipairs(ds) do
    local ok = 0
    if d[1] then ok = 1 end
    head[#head + 1] = ok
    for j = 2, 5 do head[#head + 1] = int(d[j]) end
  end
  return head
end
