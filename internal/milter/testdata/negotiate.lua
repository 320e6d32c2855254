-- Option negotiation with libmilter's defaults (version 6, every action
-- and step offered), then a connection refused at CONNECT and one
-- accepted. Run by TestMiltertest with -D port=N.
local sock = "inet:" .. port .. "@127.0.0.1"

local conn = mt.connect(sock, 5, 0.2)
if conn == nil then error("mt.connect failed") end
if mt.negotiate(conn, nil, nil, nil) ~= nil then error("mt.negotiate failed") end
-- The engine uses only the actions its options ask for...
if not mt.test_action(conn, SMFIF_ADDHDRS) then error("ADDHDRS not negotiated") end
if not mt.test_action(conn, SMFIF_QUARANTINE) then error("QUARANTINE not negotiated") end
if mt.test_action(conn, SMFIF_CHGFROM) then error("CHGFROM negotiated but not asked for") end
-- ...asks to skip the steps its handler does not implement (DATA,
-- UNKNOWN), and keeps the others.
if not mt.test_option(conn, SMFIP_NODATA) then error("NODATA not negotiated") end
if not mt.test_option(conn, SMFIP_NOUNKNOWN) then error("NOUNKNOWN not negotiated") end
if mt.test_option(conn, SMFIP_NOHDRS) then error("NOHDRS negotiated for a header handler") end
if mt.test_option(conn, SMFIP_NR_CONN) then error("NR_CONN negotiated") end
if not mt.test_option(conn, SMFIP_SKIP) then error("SKIP not echoed for a body handler") end

-- A refusal at CONNECT: a 421 reply code.
if mt.conninfo(conn, "reject.example", "192.0.2.9") ~= nil then error("mt.conninfo failed") end
if mt.getreply(conn) ~= SMFIR_REPLYCODE then error("CONNECT of reject.example not refused") end
mt.disconnect(conn)

-- An accepted connection.
conn = mt.connect(sock, 5, 0.2)
if conn == nil then error("mt.connect failed") end
if mt.conninfo(conn, "client.example", "192.0.2.1") ~= nil then error("mt.conninfo failed") end
if mt.getreply(conn) ~= SMFIR_CONTINUE then error("CONNECT not continued") end
if mt.helo(conn, "client.example") ~= nil then error("mt.helo failed") end
if mt.getreply(conn) ~= SMFIR_CONTINUE then error("HELO not continued") end
mt.disconnect(conn)
mt.echo("negotiate: ok")
