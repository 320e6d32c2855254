-- exact.lua: an Exact key is a list of event times (stored times, see
-- core.lua), oldest first, never decreasing. A reservation is marked by the
-- lowest bit of its time (an odd last digit), as limiter.State does.
--
-- A log is read into st: entries before st.start are stale (at or before
-- now - period), st.n entries are live, st.total is the list's length, and
-- st.e caches entries read, by list index.

local function odd(s) return string.byte(s, -1) % 2 == 1 end

local function flagged(s)
  if odd(s) then return s end
  return string.sub(s, 1, -2) .. string.char(string.byte(s, -1) + 1)
end

-- hitRel is rel of a time with the reservation bit cleared.
local function hitRel(s)
  if odd(s) then return rel(s) - 1 end
  return rel(s)
end

-- at returns the entry at list index j, from the nearer end.
local function at(st, j)
  local v = st.e[j]
  if v == nil then
    local i = j
    if i * 2 > st.total then i = i - st.total end
    v = redis.call('LINDEX', st.k, i)
    st.e[j] = v
  end
  return v
end

-- entry returns live entry i (0: the oldest).
local function entry(st, i) return at(st, st.start + i) end

local function exactLog(k, P, trim)
  local total, other = pread('LLEN', k)
  local st = {k = k, start = 0, n = 0, total = total or 0, e = {}, other = other}
  noteBefore(k, other or st.total > 0)
  if st.total == 0 then return st end
  if rel(at(st, 0)) <= -P then
    local a, b = 0, st.total -- at(a) is stale; the first live one is in (a, b]
    while b - a > 1 do
      local m = math.floor((a + b) / 2)
      if rel(at(st, m)) <= -P then a = m else b = m end
    end
    st.start = b
  end
  st.n = st.total - st.start
  if trim and st.start > 0 then
    if st.n == 0 then
      drop(k)
      st.e = {}
    else
      redis.call('LTRIM', k, st.start, -1)
      local e = {}
      for j, v in pairs(st.e) do
        if j >= st.start then e[j - st.start] = v end
      end
      st.e = e
    end
    st.total, st.start = st.n, 0
  end
  return st
end

local function push(k, v, m)
  local batch = {}
  for i = 1, math.min(m, 512) do batch[i] = v end
  while m > 0 do
    for i = m + 1, #batch do batch[i] = nil end
    redis.call('RPUSH', k, unpack(batch))
    m = m - #batch
  end
  setLive(k, true)
end

-- hitTime is when a hit made now is recorded: now (reservation bit clear),
-- or the newest hit if a caller with a later clock got there first.
local function hitTime(st)
  if st.ht then return st.ht end
  local t = -(nowN % 2)
  local i = st.n
  while i > 0 do
    local from = math.max(i - 32, 0)
    local c = redis.call('LRANGE', st.k, st.start + from, st.start + i - 1)
    local found = false
    for j = #c, 1, -1 do
      st.e[st.start + from + j - 1] = c[j]
      if not found and not odd(c[j]) then
        local e = rel(c[j])
        if e > t then t = e end
        found = true
      end
    end
    if found then break end
    i = from
  end
  st.ht = t
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

-- expireExact sets an exact log's TTL from its newest event, and notes
-- whether the list still exists.
local function expireExact(k, P)
  local last = redis.call('LINDEX', k, -1)
  if last then
    expireIn(k, rel(last) + P)
  else
    setLive(k, false)
  end
end

ALGO.e = {
  read = function(c, trim) return exactLog(c.k, c.P, trim) end,

  decide = function(c, st, n)
    local N, P = c.N, c.P
    local base = hitTime(st)
    local t = earliest(st, base, N, n, P)
    local held = st.n
    local ok = t ~= nil and t <= base
    local count = held
    if ok then count = count + n end
    local reset = 0
    if held > 0 then reset = rel(entry(st, held - 1)) + P end
    local retry = 0
    if not ok then
      if t == nil then retry = NEVER else retry = t - base end
    end
    return {ok, count, math.max(N - count, 0), retry, reset}
  end,

  -- record adds n events now to a trimmed log and returns the events held.
  record = function(c, st, n)
    local N, P, k = c.N, c.P, c.k
    if st.other then
      drop(k)
      st = {k = k, start = 0, n = 0, total = 0, e = {}}
    end
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
      push(k, last, m)
    end
    local held = st.n + m
    if last == nil then return held end
    local lr = rel(last)
    if not odd(last) or lr <= 0 then
      -- Strict counting of a flood keeps at most 4N events.
      local keep = math.min(4 * N, MAXEXACT)
      if held > keep then
        redis.call('LTRIM', k, -keep, -1)
        held = keep
      end
    end
    expireIn(k, lr + P)
    return held
  end,

  -- undo deletes up to n hit (not reserved) events, the oldest first among
  -- those at or after at (relative, reservation bit clear): a hit is
  -- recorded at its caller's time or a little later, never earlier. Events
  -- already outside their window are left alone.
  undo = function(c, st, n, at)
    if st.other then return drop(c.k) end
    if st.n == 0 or at <= -c.P then return end
    local a, b = -1, st.n -- entry(a) < at; the first at or after it is in (a, b]
    while b - a > 1 do
      local m = math.floor((a + b) / 2)
      if rel(entry(st, m)) >= at then b = m else a = m end
    end
    local counts, order, left, i = {}, {}, n, b
    while i < st.n and left > 0 do
      local cs = redis.call('LRANGE', st.k, st.start + i, st.start + math.min(i + 63, st.n - 1))
      for j = 1, #cs do
        if left == 0 then break end
        local v = cs[j]
        if not odd(v) then
          if not counts[v] then
            counts[v] = 0
            order[#order + 1] = v
          end
          counts[v] = counts[v] + 1
          left = left - 1
        end
      end
      i = i + 64
    end
    if #order == 0 then return end
    -- Equal times are interchangeable, so removing the newest copies of a
    -- value (LREM from the tail, cheaper) leaves the same log.
    for _, v in ipairs(order) do redis.call('LREM', st.k, -counts[v], v) end
    expireExact(st.k, c.P)
  end,
}
