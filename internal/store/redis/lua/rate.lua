-- rate.lua: checks for the rate scripts (hit, peek, undo). After their own
-- arguments come six per check: algorithm (a, e, s), N, period in ns, x
-- (anvil: period in seconds; smooth: interval in ns), burst, counter.

local function readChecks(first)
  local cs = {}
  for i = 1, #KEYS do
    local o = first + (i - 1) * 6
    cs[i] = {
      k = KEYS[i], algo = ARGV[o], N = tonumber(ARGV[o + 1]), P = tonumber(ARGV[o + 2]),
      x = tonumber(ARGV[o + 3]), b = tonumber(ARGV[o + 4]), ctr = ARGV[o + 5],
    }
  end
  return cs
end

-- reply flattens decisions after a header.
local function reply(head, ds)
  for _, d in ipairs(ds) do
    local ok = 0
    if d[1] then ok = 1 end
    head[#head + 1] = ok
    for j = 2, 5 do head[#head + 1] = int(d[j]) end
  end
  return head
end
