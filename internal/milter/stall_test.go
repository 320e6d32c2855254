package milter

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"sluice/internal/milter/wire"
)

// TestStalledPacketMemory: a peer that announces a packet of max_packet
// bytes (1 MiB) and then sends one byte of it must not make the server
// hold the whole announced size for as long as it trickles: the buffer
// should grow with the bytes that arrive. 100 such sessions are opened
// and the Go heap they cost is measured.
// Were the announced size allocated at the header, max_sessions peers
// could pin max_sessions x max_packet bytes (4096 x 1 MiB with the
// defaults) for as long as the request deadline lets them.
func TestStalledPacketMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 100 sessions")
	}
	const k, maxData = 100, 1 << 20
	h := &minimal{}
	s, addr := start(t, Options{Handler: h, MaxData: maxData, IdleTimeout: time.Minute})
	before, _ := memUsed(t)
	var hdr [6]byte
	binary.BigEndian.PutUint32(hdr[:], maxData+1)
	hdr[4] = 'B' // SMFIC_BODY
	hdr[5] = 'x' // the first byte of the payload, and the last for now
	conns := make([]net.Conn, 0, k)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range k {
		c, err := net.Dial("tcp", addr)
		must(t, err)
		conns = append(conns, c)
		_, err = c.Write(hdr[:])
		must(t, err)
	}
	eventually(t, func() bool { return s.Sessions() == k }, "%d sessions", k)
	// Every session has read its header and waits inside the packet.
	eventually(t, func() bool { return s.Partials() >= k }, "%d sessions inside their packet", k)
	after, _ := memUsed(t)
	per := float64(int64(after)-int64(before)) / k
	t.Logf("%d sessions each stalled 1 byte into an announced %d-byte packet: %.0f bytes of Go heap each", k, maxData, per)
	if per > 128<<10 {
		t.Errorf("a session stalled inside a packet holds %.0f bytes (the announced size, not what arrived); want <= 128 KiB", per)
	}
}

// TestRequestTimeout: a peer that sends a packet one byte at a time,
// steadily, is cut off by the request deadline, which runs from the
// packet's first byte; waiting between packets is bounded only by the
// idle deadline, and a session idle for longer than the request
// deadline still works.
func TestRequestTimeout(t *testing.T) {
	const rt = 300 * time.Millisecond
	_, addr := start(t, Options{Handler: &minimal{}, IdleTimeout: time.Minute, RequestTimeout: rt})

	t.Run("trickle", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		must(t, err)
		defer c.Close()
		pkt := optneg()
		sent := 0
		for ; sent < len(pkt); sent++ {
			if _, err := c.Write(pkt[sent : sent+1]); err != nil {
				break
			}
			time.Sleep(rt / 5)
		}
		// The server closed the connection: the next read sees the end.
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var b [64]byte
		n, err := c.Read(b[:])
		if err == nil {
			t.Fatalf("a packet sent at 5 bytes per %v got %d bytes of answer; want the session cut", rt, n)
		}
		if sent == len(pkt) && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read after the trickle: %v; want the server's close", err)
		}
	})

	t.Run("idle between packets", func(t *testing.T) {
		m := dial(t, addr)
		time.Sleep(3 * rt) // idle before the first packet
		must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
		time.Sleep(3 * rt) // and between packets
		connect(t, m)
	})
}
