-- peek.lua: the decisions a hit of n would get; changes nothing.
-- ARGV[3] n; checks from ARGV[4]. Reply as hit's.
local n = tonumber(ARGV[3])
local ds = {}
for i, c in ipairs(readChecks(4)) do
  local A = ALGO[c.algo]
  local d = A.decide(c, A.read(c, false), n)
  if d[1] then d[2] = d[2] - n end
  ds[i] = d
end
return reply({0, nowS, nowN}, ds)
