package limiter

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/clock"
)

func TestMemoryMarks(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	clk := clock.NewFake(now)
	path := filepath.Join(t.TempDir(), "throttle.marks")
	mm, err := NewMemoryMarks(path, clk)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file before any mark: %v", err)
	}
	if err := mm.Put(ctx, "relay *", "limit", Mark{Value: 7, Since: now}); err != nil {
		t.Fatal(err)
	}
	if ok, err := mm.Add(ctx, "relay *", "suspend", Mark{Value: 1, Since: now, Expires: now.Add(time.Minute)}); !ok || err != nil {
		t.Fatalf("Add: %v %v", ok, err)
	}
	if ok, _ := mm.Add(ctx, "relay *", "suspend", Mark{Value: 2, Expires: now.Add(time.Hour)}); ok {
		t.Fatal("Add over a live mark")
	}
	// Read back from the file, as after a restart.
	back, err := NewMemoryMarks(path, clk)
	if err != nil {
		t.Fatal(err)
	}
	list, _ := back.List(ctx)
	if len(list) != 2 || list[0].Name != "limit" || list[0].Value != 7 || !list[0].Since.Equal(now) || list[1].Name != "suspend" || !list[1].Expires.Equal(now.Add(time.Minute)) {
		t.Fatalf("read back: %+v", list)
	}
	clk.Advance(2 * time.Minute) // the suspension expires
	now = clk.Now()
	if _, ok, _ := back.Get(ctx, "relay *", "suspend"); ok {
		t.Fatal("an expired mark reads as present")
	}
	if ok, _ := back.Add(ctx, "relay *", "suspend", Mark{Value: 2, Expires: now.Add(time.Hour)}); !ok {
		t.Fatal("Add over an expired mark refused")
	}
	if err := back.Delete(ctx, "relay *", "limit"); err != nil {
		t.Fatal(err)
	}
	again, _ := NewMemoryMarks(path, clk)
	if l, _ := again.List(ctx); len(l) != 1 || l[0].Value != 2 {
		t.Fatalf("after Delete and Add: %+v", l)
	}
	for _, kn := range [][2]string{{"", "x"}, {"k", ""}, {strings.Repeat("k", 1025), "x"}, {"k", strings.Repeat("n", 65)}} {
		if err := again.Put(ctx, kn[0], kn[1], Mark{}); err == nil {
			t.Errorf("Put(%.20q, %.20q) accepted", kn[0], kn[1])
		}
	}
}

// A marks file reached through a symbolic link, or not a marks file, is
// refused, never read.
func TestMemoryMarksRefuses(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "real")
	os.WriteFile(good, EncodeMarks(nil), 0o600)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMemoryMarks(link, nil); err == nil {
		t.Error("a marks file behind a symbolic link was read")
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("SLUICEMS not marks"), 0o600)
	if _, err := NewMemoryMarks(bad, nil); !errors.Is(err, ErrMarks) {
		t.Errorf("a snapshot as marks file: %v", err)
	}
}

func TestDecodeMarksMalformed(t *testing.T) {
	good := EncodeMarks([]KeyMark{{Key: "relay *", Name: "limit", Mark: Mark{Value: 3}}})
	corrupt := append([]byte(nil), good...)
	corrupt[12] ^= 1
	reseal := func(body []byte) []byte {
		full := append(append([]byte(marksMagic), 0, marksVersion), body...)
		return binary.BigEndian.AppendUint32(full, crc32.Checksum(full, marksCRC))
	}
	cases := map[string][]byte{
		"empty":          nil,
		"short":          []byte("SLUICEMK"),
		"magic":          append([]byte("SLUICEMX"), good[8:]...),
		"version":        append(append([]byte(marksMagic), 0, 9), good[10:]...),
		"checksum":       corrupt,
		"truncated mark": reseal([]byte{7, 'r'}),
		"empty key":      reseal([]byte{0}),
		"long name":      reseal(append([]byte{1, 'k', 100}, make([]byte, 100)...)),
		"no value":       reseal([]byte{1, 'k', 1, 'n'}),
	}
	for name, b := range cases {
		if _, err := DecodeMarks(b); !errors.Is(err, ErrMarks) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if l, err := DecodeMarks(good); err != nil || len(l) != 1 || l[0].Value != 3 {
		t.Fatalf("good: %+v %v", l, err)
	}
}

func FuzzDecodeMarks(f *testing.F) {
	f.Add(EncodeMarks([]KeyMark{{Key: "relay *", Name: "limit", Mark: Mark{Value: 3, Since: time.Unix(5, 0)}}}))
	f.Add([]byte("SLUICEMK\x00\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeMarks(b)
		if err != nil {
			return
		}
		again, err := DecodeMarks(EncodeMarks(l))
		if err != nil || len(again) != len(l) {
			t.Fatalf("re-encoded marks do not decode: %v", err)
		}
	})
}
