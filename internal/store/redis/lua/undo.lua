-- undo.lua: take back n events a hit recorded at time ARGV[3] (a stored
-- time, reservation bit clear; ARGV[4] its Unix seconds). ARGV[5] n;
-- checks from ARGV[6]. Reply: keys delta, now (s, ns).
local t, tS, n = rel(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
for _, c in ipairs(readChecks(6)) do
  local A = ALGO[c.algo]
  A.undo(c, A.read(c, true), n, t, tS)
end
return {keysDelta(), nowS, nowN}
