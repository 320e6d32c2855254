package wire

import "testing"

// What a milter session keeps of CONNECT and of a MACRO packet is one
// string each: the host name and address are slices of one, a MACRO
// packet's names and values of another.
func TestDecodeAllocatesOneString(t *testing.T) {
	connect, err := Encode(nil, &Connect{Host: "client.example", Family: FamilyInet, Port: 54321, Addr: "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	macro, err := Encode(nil, &Macro{Cmd: CmdConnect, NameValues: []string{"j", "mx.example", "{daemon_name}", "smtpd"}})
	if err != nil {
		t.Fatal(err)
	}
	var c Connect
	if n := testing.AllocsPerRun(100, func() {
		if err := c.DecodeData(connect[5:]); err != nil {
			t.Fatal(err)
		}
	}); n != 1 || c.Host != "client.example" || c.Addr != "192.0.2.1" {
		t.Errorf("CONNECT: %v allocations, %q %q", n, c.Host, c.Addr)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, _, err := DecodeMacroList(macro[5:]); err != nil {
			t.Fatal(err)
		}
	}); n != 1 {
		t.Errorf("MACRO: %v allocations", n)
	}
}
