-- smooth.lua: a Smooth key is a string: GCRA's theoretical arrival time.

-- smoothSet stores a theoretical arrival time (relative to now), or drops
-- the key when the bucket is empty.
local function smoothSet(k, tat)
  if tat <= 0 then return drop(k) end
  redis.call('SET', k, abs(tat), 'PX', string.format('%d', math.ceil(tat / 1e6)))
  setLive(k, true)
end

ALGO.s = {
  read = function(c)
    local v, other = pread('GET', c.k)
    noteBefore(c.k, other or (v and true or false))
    local S = {other = other, tat = 0}
    if v then S.tat = math.max(rel(v), 0) end
    return S
  end,

  decide = function(c, S, n)
    local iv, b = c.x, c.b
    local tat = S.tat
    local newTat = tat + n * iv
    local allowAt = newTat - b * iv
    if allowAt <= 0 then
      local cnt = ceilDiv(newTat, iv)
      return {true, cnt, math.max(b - cnt, 0), 0, newTat}
    end
    local cnt = ceilDiv(tat, iv)
    local retry = allowAt
    if n > b then retry = NEVER end
    return {false, cnt, math.max(b - cnt, 0), retry, tat}
  end,

  -- record adds n events and returns the bucket level in events.
  record = function(c, S, n)
    -- Strict counting may push the bucket past full; cap the debt at one
    -- period beyond a full bucket so a stopped client recovers.
    local tat = math.min(S.tat + n * c.x, c.b * c.x + c.P)
    smoothSet(c.k, tat)
    return ceilDiv(tat, c.x)
  end,

  undo = function(c, S, n)
    if S.other then return drop(c.k) end
    if S.tat > 0 then smoothSet(c.k, math.max(S.tat - n * c.x, 0)) end
  end,
}
