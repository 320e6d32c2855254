package postfixrun

import (
	"os"
	"path/filepath"
	"testing"
)

func TestIsPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for _, tc := range []struct {
		f    *os.File
		want bool
	}{{r, true}, {f, false}, {null, false}} {
		if got := IsPipe(tc.f); got != tc.want {
			t.Errorf("IsPipe(%s) = %v", tc.f.Name(), got)
		}
	}
}
