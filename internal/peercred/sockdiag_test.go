package peercred

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"
)

var (
	v4ID = sockID{src: netip.MustParseAddrPort("127.0.0.1:40000"), dst: netip.MustParseAddrPort("127.0.0.2:8891")}
	v6ID = sockID{src: netip.MustParseAddrPort("[::1]:40000"), dst: netip.MustParseAddrPort("[::1]:8891")}
)

// hexBytes reads hex with spaces and newlines in it.
func hexBytes(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEncodeRequest: the request's bytes, field by field, as the kernel's
// structs lay them out (little-endian host: netlink header and integers;
// ports and addresses big-endian).
func TestEncodeRequest(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the expected bytes are written for a little-endian host")
	}
	cases := []struct {
		name string
		id   sockID
		want string
	}{
		{"IPv4", v4ID, `
			48000000 1400 0100 07000000 00000000
			02 06 00 00 ffffffff
			9c40 22bb
			7f000001 00000000 00000000 00000000
			7f000002 00000000 00000000 00000000
			00000000 ffffffff ffffffff`},
		{"IPv6", v6ID, `
			48000000 1400 0100 07000000 00000000
			0a 06 00 00 ffffffff
			9c40 22bb
			00000000 00000000 00000000 00000001
			00000000 00000000 00000000 00000001
			00000000 ffffffff ffffffff`},
	}
	for _, c := range cases {
		got := encodeRequest(7, c.id)
		if want := hexBytes(t, c.want); !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %x\nwant %x", c.name, got, want)
		}
	}
}

// diagMsg builds the kernel's answer: one SOCK_DIAG_BY_FAMILY message
// with an inet_diag_msg for id in state, owned by uid, with attrs after.
func diagMsg(seq uint32, family, state uint8, id sockID, uid uint32, attrs int) []byte {
	ne := binary.NativeEndian
	n := nlmsgHdrLen + inetDiagMsgLen + attrs
	b := make([]byte, n)
	ne.PutUint32(b[0:], uint32(n))
	ne.PutUint16(b[4:], sockDiagByFam)
	ne.PutUint32(b[8:], seq)
	m := b[nlmsgHdrLen:]
	m[0], m[1] = family, state
	putSockID(m[4:4+sockIDLen], id)
	if family == syscall.AF_INET6 && id.src.Addr().Is4() { // a v6 socket on v4-mapped addresses
		s, d := id.src.Addr().As16(), id.dst.Addr().As16()
		copy(m[8:24], s[:])
		copy(m[24:40], d[:])
	}
	ne.PutUint32(m[64:], uid)
	return b
}

// errMsg builds an NLMSG_ERROR answer carrying -errno.
func errMsg(seq uint32, errno syscall.Errno) []byte {
	b := make([]byte, nlmsgHdrLen+4+nlmsgHdrLen)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], nlmsgError)
	ne.PutUint32(b[8:], seq)
	ne.PutUint32(b[nlmsgHdrLen:], uint32(-int32(errno)))
	return b
}

// TestParseReply: each kind of answer the kernel gives, and the ways a
// datagram can be wrong.
func TestParseReply(t *testing.T) {
	const est = 1 // TCP_ESTABLISHED
	mapped := sockID{src: netip.MustParseAddrPort("127.0.0.1:40000"), dst: netip.MustParseAddrPort("127.0.0.1:8891")}
	short := diagMsg(7, syscall.AF_INET, est, v4ID, 1000, 0)
	binary.NativeEndian.PutUint32(short, nlmsgHdrLen+10)
	cases := []struct {
		name    string
		in      []byte
		want    sockID
		uid     int
		err     error
		errText string
	}{
		{"IPv4 owner", diagMsg(7, syscall.AF_INET, est, v4ID, 1000, 0), v4ID, 1000, nil, ""},
		{"IPv6 owner", diagMsg(7, syscall.AF_INET6, est, v6ID, 65534, 0), v6ID, 65534, nil, ""},
		{"v6 socket on v4-mapped addresses", diagMsg(7, syscall.AF_INET6, est, mapped, 42, 0), mapped, 42, nil, ""},
		{"attributes after the message", diagMsg(7, syscall.AF_INET, est, v4ID, 5, 24), v4ID, 5, nil, ""},
		{"an ack, then the answer", append(errMsg(7, 0), diagMsg(7, syscall.AF_INET, est, v4ID, 9, 0)...), v4ID, 9, nil, ""},
		{"another request's answer first", append(diagMsg(6, syscall.AF_INET, est, v4ID, 1, 0), diagMsg(7, syscall.AF_INET, est, v4ID, 2, 0)...), v4ID, 2, nil, ""},
		{"no such socket", errMsg(7, syscall.ENOENT), v4ID, -1, ErrGone, ""},
		{"other error", errMsg(7, syscall.EPERM), v4ID, -1, syscall.EPERM, ""},
		{"TIME_WAIT has no owner", diagMsg(7, syscall.AF_INET, tcpTimeWait, v4ID, 0, 0), v4ID, -1, ErrGone, ""},
		{"a listener is not the peer", diagMsg(7, syscall.AF_INET, tcpListen, v4ID, 0, 0), v4ID, -1, ErrGone, ""},
		{"another socket's answer", diagMsg(7, syscall.AF_INET, est, v4ID, 0, 0), mapped, -1, nil, "answered for"},
		{"unknown family", diagMsg(7, 99, est, v4ID, 0, 0), v4ID, -1, nil, "address family 99"},
		{"only another request's answer", diagMsg(8, syscall.AF_INET, est, v4ID, 0, 0), v4ID, -1, errOtherMessage, ""},
		{"empty", nil, v4ID, -1, errOtherMessage, ""},
		{"length beyond the datagram", diagMsg(7, syscall.AF_INET, est, v4ID, 0, 0)[:40], v4ID, -1, nil, "message length"},
		{"inet_diag_msg cut short", short[:nlmsgHdrLen+10], v4ID, -1, nil, "inet_diag_msg of 10 bytes"},
		{"done", func() []byte { b := errMsg(7, 0); binary.NativeEndian.PutUint16(b[4:], nlmsgDone); return b }(), v4ID, -1, ErrGone, ""},
	}
	for _, c := range cases {
		uid, err := parseReply(c.in, 7, c.want)
		switch {
		case c.err != nil && !errors.Is(err, c.err):
			t.Errorf("%s: err %v, want %v", c.name, err, c.err)
		case c.errText != "" && (err == nil || !strings.Contains(err.Error(), c.errText)):
			t.Errorf("%s: err %v, want one saying %q", c.name, err, c.errText)
		case c.err == nil && c.errText == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case uid != c.uid:
			t.Errorf("%s: uid %d, want %d", c.name, uid, c.uid)
		}
	}
}

// FuzzParseReply: any datagram gives a uid or an error, never a panic,
// and a uid only with no error.
func FuzzParseReply(f *testing.F) {
	f.Add(diagMsg(1, syscall.AF_INET, 1, v4ID, 1000, 0))
	f.Add(diagMsg(1, syscall.AF_INET6, 1, v6ID, 0, 16))
	f.Add(errMsg(1, syscall.ENOENT))
	f.Add(append(errMsg(1, 0), diagMsg(1, syscall.AF_INET, 1, v4ID, 7, 3)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, id := range []sockID{v4ID, v6ID} {
			uid, err := parseReply(b, 1, id)
			if (err == nil) == (uid < 0) {
				t.Fatalf("uid %d with err %v", uid, err)
			}
		}
	})
}
