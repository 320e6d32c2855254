-- peek.lua: the decisions a hit of n would get; changes nothing.
-- ARGV[3] n; checks from ARGV[4].
local n = tonumber(ARGV[3])
local ds = {}
for i, c in ipairs(readChecks(4)) do
  local d = decide(c, n, kind(c.k, WANT[c.algo]) == 'same', false)
  if d[1] then d[2] = d[2] - n end
  ds[i] = d
end
return reply({0, nowS, nowN}, ds)
