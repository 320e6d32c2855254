-- Many idle sessions: open 200 connections, take each past CONNECT, and
-- leave them all open; then check every one still answers and close
-- them. The engine holds them as data plus one small goroutine each.
local sock = "inet:" .. port .. "@127.0.0.1"
local n = 200
local conns = {}
for i = 1, n do
	local conn = mt.connect(sock, 5, 0.2)
	if conn == nil then error("mt.connect " .. i .. " failed") end
	if mt.conninfo(conn, "client" .. i .. ".example", "192.0.2.1") ~= nil then error("mt.conninfo failed") end
	if mt.getreply(conn) ~= SMFIR_CONTINUE then error("CONNECT " .. i .. " not continued") end
	conns[i] = conn
end
mt.sleep(0.5)
for i = 1, n do
	if mt.helo(conns[i], "client.example") ~= nil then error("mt.helo " .. i .. " failed") end
	if mt.getreply(conns[i]) ~= SMFIR_CONTINUE then error("HELO " .. i .. " not continued") end
end
for i = 1, n do
	mt.disconnect(conns[i])
end
mt.echo("idle: ok")
