-- hit.lua: record n events against every check, atomically.
-- ARGV[3] n, ARGV[4] '1' for Strict; checks from ARGV[5].
-- Reply: keys delta, now (s, ns), then five integers per check.
local n = tonumber(ARGV[3])
local strict = ARGV[4] == '1'
local cs = readChecks(5)
local uses, ss, ds, all = {}, {}, {}, true
for i, c in ipairs(cs) do
  uses[c.k] = (uses[c.k] or 0) + 1
  -- Reading an exact log drops its stale events (invisible to callers).
  ss[i] = ALGO[c.algo].read(c, true)
  ds[i] = ALGO[c.algo].decide(c, ss[i], n)
  all = all and ds[i][1]
end
if all or strict then
  for i, c in ipairs(cs) do
    local A = ALGO[c.algo]
    local S = ss[i]
    -- A key checked twice in one hit is read again after the first record.
    if uses[c.k] > 1 then S = A.read(c, true) end
    local v = A.record(c, S, n)
    if not ds[i][1] then ds[i][2] = v end -- Strict: report the new level
  end
end
return reply({keysDelta(), nowS, nowN}, ds)
