package sendmailcf

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, cf string
		want     int64
		err      string // substring; "" for none
	}{
		{"m4's line", "O QueueLA=8\nO MaxDaemonChildren=12\nO RefuseLA=12\n", 12, ""},
		{"spaces around", "O  MaxDaemonChildren = 30 \n", 30, ""},
		{"tab after O: not an option line", "O\tMaxDaemonChildren=7\n", 0, "no MaxDaemonChildren"},
		{"a comment after the value", "O MaxDaemonChildren=12 # at most\n", 12, ""},
		{"case", "O maxdaemonchildren=5\n", 5, ""},
		{"the last wins", "O MaxDaemonChildren=5\nO MaxDaemonChildren=9\n", 9, ""},
		{"commented", "#O MaxDaemonChildren=12\n", 0, "no MaxDaemonChildren"},
		{"none", "O QueueLA=8\nR$* $@ $1\n", 0, "no MaxDaemonChildren"},
		{"zero", "O MaxDaemonChildren=0\n", 0, "no MaxDaemonChildren"},
		{"empty file", "", 0, "no MaxDaemonChildren"},
		{"another option", "O MaxDaemonChildrenX=4\n", 0, "no MaxDaemonChildren"},
		{"not an option line", "OMaxDaemonChildren=4\n", 0, "no MaxDaemonChildren"},
		{"macro, not option", "D{MaxDaemonChildren}=4\n", 0, "no MaxDaemonChildren"},
		{"not a number", "O MaxDaemonChildren=twelve\n", 0, `line 1: MaxDaemonChildren="twelve" is not a number`},
		{"negative", "O X=1\nO MaxDaemonChildren=-3\n", 0, "line 2: "},
		{"empty value", "O MaxDaemonChildren=\n", 0, "is not a number"},
		{"overflow", "O MaxDaemonChildren=99999999999999999999\n", 0, "is not a number"},
		{"long value clipped", "O MaxDaemonChildren=" + strings.Repeat("x", 500) + "\n", 0, `xxx..."`},
		{"line too long", "O MaxDaemonChildren=4\n" + strings.Repeat("#", maxLine+1) + "\n", 0, "line 2: bufio.Scanner: token too long"},
		{"CRLF", "O MaxDaemonChildren=4\r\n", 4, ""},
		{"NUL", "O MaxDaemonChildren=4\x00\n", 0, "is not a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.cf))
			if tc.err == "" {
				if err != nil || got != tc.want {
					t.Fatalf("Parse = %d, %v; want %d", got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Parse = %d, %v; want an error with %q", got, err, tc.err)
			}
			if strings.Contains(tc.err, "no MaxDaemonChildren") && !errors.Is(err, ErrNoLimit) {
				t.Fatalf("error %v is not ErrNoLimit", err)
			}
		})
	}
}

// TestMaxDaemonChildrenFile: the file is read as safefs reads it: a FIFO,
// a file over MaxFile and a missing one are errors naming it.
func TestMaxDaemonChildrenFile(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "sendmail.cf")
	if err := os.WriteFile(ok, []byte("O MaxDaemonChildren=40\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := MaxDaemonChildren(ok); err != nil || n != 40 {
		t.Fatalf("MaxDaemonChildren = %d, %v; want 40", n, err)
	}
	fifo := filepath.Join(dir, "fifo.cf")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.cf")
	if err := os.WriteFile(big, make([]byte, MaxFile+1), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, big, filepath.Join(dir, "missing.cf")} {
		if _, err := MaxDaemonChildren(p); err == nil || !strings.Contains(err.Error(), "sendmail.cf") {
			t.Fatalf("MaxDaemonChildren(%s) = %v, want an error naming sendmail.cf", filepath.Base(p), err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("O MaxDaemonChildren=12\n"))
	f.Add([]byte("O  maxdaemonchildren = 7\r\n#O MaxDaemonChildren=3\n"))
	f.Add([]byte("O MaxDaemonChildren=-1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := Parse(b)
		if err == nil && n <= 0 {
			t.Fatalf("Parse = %d with no error", n)
		}
		if err != nil && n != 0 {
			t.Fatalf("Parse = %d with error %v", n, err)
		}
	})
}
