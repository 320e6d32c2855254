-- undo.lua: take back n events a hit recorded at time ARGV[3] (Unix ns,
-- reservation bit clear). ARGV[4] is that time's Unix seconds, ARGV[5] n;
-- checks from ARGV[6]. Events already outside their window are left alone.
-- Reply: keys delta, now (s, ns).
local at = rel(ARGV[3])
local atS = tonumber(ARGV[4])
local n = tonumber(ARGV[5])
local seen = {}

-- removeHits deletes up to n hit (not reserved) events, the oldest first
-- among those at or after at: a hit is recorded at its caller's time or a
-- little later, never earlier.
local function removeHits(st)
  if st.n == 0 then return end
  local a, b = -1, st.n -- entry(a) < at; the first at or after it is in (a, b]
  while b - a > 1 do
    local m = math.floor((a + b) / 2)
    if rel(entry(st, m)) >= at then b = m else a = m end
  end
  local counts, order, left, i = {}, {}, n, b
  while i < st.n and left > 0 do
    local c = redis.call('LRANGE', st.k, st.start + i, st.start + math.min(i + 63, st.n - 1))
    for j = 1, #c do
      if left == 0 then break end
      local v = c[j]
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
  -- Equal times are interchangeable, so removing the newest copies of a
  -- value (LREM from the tail, cheaper) leaves the same log.
  for _, v in ipairs(order) do redis.call('LREM', st.k, -counts[v], v) end
end

for _, c in ipairs(readChecks(6)) do
  local kd = kind(c.k, WANT[c.algo])
  if seen[c.k] == nil then seen[c.k] = kd ~= 'none' end
  if kd == 'other' then redis.call('DEL', c.k) end
  if kd == 'same' and n > 0 then
    if c.algo == 'a' then
      local T, cnt = anvilRead(c.k, c.ctr, true)
      if not anvilStale(T, c.x) and atS >= T then
        redis.call('HSET', c.k, c.ctr, string.format('%d', math.max(cnt - n, 0)))
      end
    elseif c.algo == 'e' then
      local st = exactLog(c.k, c.P, true)
      trimStale(st)
      if at > -c.P then
        removeHits(st)
        expireExact(c.k, c.P)
      end
    else
      local T = smoothRead(c.k, true)
      if T and T > 0 then smoothSet(c.k, math.max(T - n * c.x, 0)) end
    end
  end
end
return {keysDelta(seen), nowS, nowN}
