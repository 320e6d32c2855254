package redis

import "context"

var ctx = context.Background()
