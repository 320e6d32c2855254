package socketmap

import (
	"context"
	"errors"
	"strings"

	"sluice/internal/percent"
	"sluice/internal/pool"
)

// Replies for lookups that got no answer from a worker (docs/protocols/mimedefang-multiplexor.md, "Socket map").
const (
	ReplyNoFree      = "TEMP No free workers"
	ReplyActivate    = "TEMP Unable to activate worker"
	ReplyTalk        = "TEMP Error talking to worker process"
	ReplyBusyTimeout = "TEMP Busy timeout on worker"
)

// PoolHandler answers lookups with a worker of a pool.Pool, as the
// reference does: the command "map <enc(mapname)> <enc(key)>" is never
// queued, and the worker's reply line loses its newline and is
// percent-decoded as a whole.
type PoolHandler struct {
	Pool *pool.Pool
}

// Command is the worker command for a lookup (without its newline).
func Command(mapName, key string) string {
	return "map " + percent.Encode(mapName) + " " + percent.Encode(key)
}

// Lookup implements Handler. It fails only with pool.ErrClosed.
func (h PoolHandler) Lookup(ctx context.Context, mapName, key string) (string, error) {
	r := h.Pool.Do(ctx, pool.Request{Line: Command(mapName, key), Map: true})
	return PoolReply(r)
}

// PoolReply is the reply payload for a pool result.
func PoolReply(r pool.Result) (string, error) {
	switch {
	case r.Err == nil:
		return percent.Decode(strings.TrimSuffix(string(r.Reply), "\n")), nil
	case errors.Is(r.Err, pool.ErrNoFreeWorkers):
		return ReplyNoFree, nil
	case errors.Is(r.Err, pool.ErrActivate):
		return ReplyActivate, nil
	case errors.Is(r.Err, pool.ErrTalk):
		return ReplyTalk, nil
	case errors.Is(r.Err, pool.ErrNoResponse), errors.Is(r.Err, pool.ErrBusyTimeout):
		return ReplyBusyTimeout, nil
	default:
		return "", r.Err
	}
}
