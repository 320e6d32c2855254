//go:build !race

package netserve

import (
	"io"
	"testing"
)

// TestReadWriteAllocateNothing: a door's read and write of a request
// allocate nothing (the race detector's build allocates in its
// annotations, so this runs without it; scripts/test.sh runs the door
// packages without -race too).
func TestReadWriteAllocateNothing(t *testing.T) {
	addr, conns, _ := connServer(t, "unix")
	client := dialConn(t, "unix", addr)
	c := <-conns
	req, buf := []byte("request\n"), make([]byte, 64)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := client.Write(req); err != nil {
			t.Fatal(err)
		}
		n, err := c.Conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Conn.Write(buf[:n]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(client, buf[:n]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per request, want 0", allocs)
	}
}
