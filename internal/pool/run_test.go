package pool_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"sluice/internal/pool"
)

// TestRunFailsWithoutEpoll: the owner's epoll set is not optional. With
// no descriptor left for it (RLIMIT_NOFILE at the lowest free number),
// Run returns an error that says so, and the pool refuses requests.
func TestRunFailsWithoutEpoll(t *testing.T) {
	p, err := pool.New(baseConfig())
	if err != nil {
		t.Fatal(err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	free := 0 // the lowest descriptor number not open
	for {
		if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(free), syscall.F_GETFD, 0); e == syscall.EBADF {
			break
		}
		free++
	}
	low := old
	low.Cur = uint64(free)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // should Run start after all, it stops at once
	runErr := p.Run(ctx)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if runErr == nil || !strings.Contains(runErr.Error(), "epoll") {
		t.Fatalf("Run without a descriptor for its epoll set: %v, want an epoll error", runErr)
	}
	if r := p.Do(context.Background(), pool.Request{Line: "hello"}); !errors.Is(r.Err, pool.ErrClosed) {
		t.Fatalf("a request after Run failed: %+v, want ErrClosed", r)
	}
}
