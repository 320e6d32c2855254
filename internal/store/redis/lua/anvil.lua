-- anvil.lua: an Anvil key is a hash: t = window start (Unix seconds), and
-- the counters '0'..'7' sharing that window.

local function anvilStale(T, Ps) return T == 0 or T + Ps < nowS end

ALGO.a = {
  read = function(c)
    local v, other = pread('HMGET', c.k, 't', c.ctr)
    local S = {other = other, T = 0, cnt = 0}
    if v then S.T, S.cnt = tonumber(v[1]) or 0, tonumber(v[2]) or 0 end
    noteBefore(c.k, other or S.T ~= 0)
    return S
  end,

  decide = function(c, S, n)
    local N, Ps = c.N, c.x
    local cur, endS = S.cnt, S.T + Ps + 1
    if anvilStale(S.T, Ps) then cur, endS = 0, nowS + Ps + 1 end
    local reset = (endS - nowS) * 1e9 - nowN
    if cur + n <= N then return {true, cur + n, N - cur - n, 0, reset} end
    local retry = reset
    if n > N then retry = NEVER end
    return {false, cur, math.max(N - cur, 0), retry, reset}
  end,

  -- record adds n to the counter and returns its new value.
  record = function(c, S, n)
    local T, cnt = S.T, S.cnt
    if S.other or anvilStale(T, c.x) then
      if S.other or T ~= 0 then redis.call('DEL', c.k) end
      T, cnt = nowS, 0
      redis.call('HSET', c.k, 't', string.format('%d', T))
    end
    local v = math.min(cnt + n, 2147483647)
    redis.call('HSET', c.k, c.ctr, string.format('%d', v))
    setLive(c.k, true)
    expireIn(c.k, (T + c.x + 1 - nowS) * 1e9 - nowN)
    return v
  end,

  -- undo takes back n events counted at atS (Unix seconds), if they are in
  -- the current window.
  undo = function(c, S, n, at, atS)
    if S.other then return drop(c.k) end
    if not anvilStale(S.T, c.x) and atS >= S.T then
      redis.call('HSET', c.k, c.ctr, string.format('%d', math.max(S.cnt - n, 0)))
    end
  end,
}
