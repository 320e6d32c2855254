-- reserve.lua: book n events under an exact limit at the earliest time
-- that keeps it, if that is within maxWait.
-- ARGV[3] N, ARGV[4] period ns, ARGV[5] n, ARGV[6] maxWait ns.
-- Reply: code (1 booked, 2 too long, 0 never), keys delta, now (s, ns),
-- the slot's time (s, ns).
local k = KEYS[1]
local N, P, n, maxWait = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local st = exactLog(k, P, true)
if st.other then
  drop(k)
  st = {k = k, start = 0, n = 0, total = 0, e = {}}
end
local t = earliest(st, 0, N, n, P)
if t == nil or st.n + n > MAXEXACT then
  return {0, keysDelta(), nowS, nowN, 0, 0}
end
local s = abs(t)
local slot = s
if odd(s) then slot = abs(t - 1) end
local slotS, slotN = tonumber(string.sub(slot, 1, -10)), tonumber(string.sub(slot, -9))
if t > maxWait then
  return {2, keysDelta(), nowS, nowN, slotS, slotN}
end
push(k, flagged(s), n)
expireIn(k, rel(flagged(s)) + P)
return {1, keysDelta(), nowS, nowN, slotS, slotN}
