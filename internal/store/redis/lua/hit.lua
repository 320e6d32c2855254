-- hit.lua: record n events against every check, atomically.
-- ARGV[3] n, ARGV[4] '1' for Strict; checks from ARGV[5].
-- Reply: keys delta, now (s, ns), then five integers per check.
local n = tonumber(ARGV[3])
local strict = ARGV[4] == '1'
local cs = readChecks(5)
local seen, ds, all = {}, {}, true
for i, c in ipairs(cs) do
  local kd = kind(c.k, WANT[c.algo])
  if seen[c.k] == nil then seen[c.k] = kd ~= 'none' end
  ds[i] = decide(c, n, kd == 'same', true)
  all = all and ds[i][1]
end
if all or strict then
  for i, c in ipairs(cs) do
    local d = ds[i]
    local kd = kind(c.k, WANT[c.algo])
    if kd == 'other' then redis.call('DEL', c.k) end
    local present = kd == 'same'
    if c.algo == 'a' then
      local v = anvilRecord(c.k, c.ctr, c.x, n, present)
      if not d[1] then d[2] = v end
    elseif c.algo == 'e' then
      local st = exactLog(c.k, c.P, present)
      trimStale(st)
      exactRecord(st, c.N, c.P, n)
      if not d[1] then d[2] = redis.call('LLEN', c.k) end
    else
      local tat = smoothRecord(c.k, smoothRead(c.k, present), c.x, c.b, c.P, n)
      if not d[1] then d[2] = ceilDiv(tat, c.x) end
    end
  end
end
return reply({keysDelta(seen), nowS, nowN}, ds)
