package milter

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"sluice/internal/clock"
	"sluice/internal/milter/wire"
)

// Reading packets: a per-connection buffer (rbuf) that usually holds a
// whole packet after one read, the idle deadline between packets and the
// request deadline inside one, and a pooled buffer for large payloads.

// read reads from the connection with the idle deadline, then re-arms
// TCP_QUICKACK. Inside a packet (see partial) the request deadline
// stays in force instead.
func (c *conn) read(p []byte) (int, error) {
	if t := c.srv.o.IdleTimeout; t > 0 && !c.inPacket {
		if now := clock.Mono(); c.readArmed == 0 || now-c.readArmed >= t/4 {
			c.nc.SetReadDeadline(clock.MonoTime(now + t))
			c.readArmed = now
		}
	}
	n, err := c.nc.Read(p)
	if n > 0 && c.raw != nil {
		quickAck(c.raw)
	}
	return n, err
}

// partial is called before a read inside a packet. The first time in a
// packet it replaces the idle deadline with the request deadline, fixed
// until the packet is complete, so a peer that trickles a packet byte by
// byte is cut off. A packet that arrives in one read, the usual case,
// costs no deadline change.
func (c *conn) partial() {
	if c.inPacket {
		return
	}
	c.inPacket = true
	c.srv.partials.Add(1)
	if t := c.srv.o.RequestTimeout; t > 0 {
		c.nc.SetReadDeadline(time.Now().Add(t))
	} else {
		c.nc.SetReadDeadline(time.Time{})
	}
}

// packetDone ends the request deadline of a packet that needed several
// reads; the next read arms the idle deadline again.
func (c *conn) packetDone() {
	if c.inPacket {
		c.inPacket = false
		c.readArmed = 0
		if c.srv.o.IdleTimeout <= 0 {
			c.nc.SetReadDeadline(time.Time{})
		}
	}
}

// readPacket returns the next packet. Its payload is valid until the
// next call.
func (c *conn) readPacket() (wire.Packet, error) {
	c.releaseBig()
	if err := c.fill(wire.LengthSize); err != nil {
		return wire.Packet{}, err
	}
	if c.rend-c.rpos < wire.HeaderSize {
		// The length came without the code byte: a zero length or one
		// over the cap is an error now, not after a byte that may never
		// come (the session would wait for its deadline, unlogged).
		if _, err := wire.ParseLength(c.rbuf[c.rpos:c.rend], c.srv.o.MaxData); err != nil {
			return wire.Packet{}, err
		}
		if err := c.fill(wire.HeaderSize); err != nil {
			return wire.Packet{}, err
		}
	}
	code, n, err := wire.ParseHeader(c.rbuf[c.rpos:c.rend], c.srv.o.MaxData)
	if err != nil {
		return wire.Packet{}, err
	}
	total := wire.HeaderSize + n
	if total <= rbufSize {
		if err := c.fill(total); err != nil {
			return wire.Packet{}, truncated(err)
		}
		data := c.rbuf[c.rpos+wire.HeaderSize : c.rpos+total]
		c.rpos += total
		c.packetDone()
		return wire.Packet{Code: code, Data: data}, nil
	}
	data, err := c.readPayload(n)
	if err != nil {
		return wire.Packet{}, err
	}
	c.packetDone()
	return wire.Packet{Code: code, Data: data}, nil
}

// readPayload reads a payload of n bytes, larger than rbuf, whose first
// bytes may already be in rbuf. Up to a body chunk's size it uses a
// pooled buffer; beyond that the buffer grows with the bytes that
// arrive, so a peer that announces a large packet and stalls holds no
// more memory than it sent (and the request deadline bounds the stall).
func (c *conn) readPayload(n int) ([]byte, error) {
	var data []byte
	if n <= wire.MaxChunk+1 {
		c.big = payloadPool.Get().(*[]byte)
		data = (*c.big)[:0:n]
	} else {
		data = make([]byte, 0, 4096)
	}
	data = append(data, c.rbuf[c.rpos+wire.HeaderSize:c.rend]...)
	c.rpos, c.rend = 0, 0
	for len(data) < n {
		c.partial()
		if len(data) == cap(data) {
			data = slices.Grow(data, min(n-len(data), cap(data)))
		}
		m, err := c.read(data[len(data):min(cap(data), n)])
		data = data[:len(data)+m]
		if err != nil && len(data) < n {
			return nil, truncated(err)
		}
	}
	return data, nil
}

// fill makes at least n <= rbufSize bytes available in rbuf[rpos:rend].
// A clean end of stream between packets is io.EOF.
func (c *conn) fill(n int) error {
	if c.rend-c.rpos >= n {
		return nil
	}
	if c.rpos > 0 {
		c.rend = copy(c.rbuf[:], c.rbuf[c.rpos:c.rend])
		c.rpos = 0
	}
	for c.rend < n {
		if c.rend > 0 {
			c.partial() // the packet has begun
		}
		m, err := c.read(c.rbuf[c.rend:])
		c.rend += m
		if err != nil && c.rend < n {
			if c.rend > 0 {
				return truncated(err)
			}
			return err
		}
	}
	return nil
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: stream ended inside a packet: %w", wire.ErrMalformed, io.ErrUnexpectedEOF)
	}
	return err
}

func (c *conn) releaseBig() {
	if c.big != nil {
		if len(*c.big) == wire.MaxChunk+1 {
			payloadPool.Put(c.big)
		}
		c.big = nil
	}
}
