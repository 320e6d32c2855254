-- probe.lua: the server's time; checks that it runs Redis 7 scripts.
-- Reply: now (s, ns).
return {nowS, nowN}
