package lease

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/group/internal/fake"
	"github.com/chatpulse/chatpulse/internal/natstest"
)

// The fake bucket the lease tests run on keeps the rules that the lease
// loop relies on as bus.Bucket over JetStream keeps them: the same
// writes get the same outcomes, and the watch delivers the same entries.
func TestKeyValueContract(t *testing.T) {
	buckets := map[string]func(t *testing.T) KV{
		"fake": func(t *testing.T) KV { return fake.NewKV(fake.NewClock(), time.Hour, &fake.Trace{}) },
		"jetstream": func(t *testing.T) KV {
			kv, err := Open(t.Context(), natstest.Bus(t, natstest.Start(t).URL()), "contract", 1, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			return kv
		},
	}
	for name, open := range buckets {
		t.Run(name, func(t *testing.T) {
			kv := open(t)
			ctx := t.Context()
			changed := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, bus.ErrKeyChanged) {
					t.Errorf("%s: %v, want bus.ErrKeyChanged", what, err)
				}
			}
			ok := func(what string, err error) {
				t.Helper()
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}
			r1, err := kv.Create(ctx, "owner.1", []byte("a"))
			ok("create", err)
			_, err = kv.Create(ctx, "owner.1", []byte("b"))
			changed("create of a key that exists", err)
			r2, err := kv.Update(ctx, "owner.1", []byte("a2"), r1)
			ok("update", err)
			if r2 <= r1 {
				t.Errorf("update: revision %d after %d", r2, r1)
			}
			_, err = kv.Update(ctx, "owner.1", []byte("b"), r1)
			changed("update of an old revision", err)
			_, err = kv.Update(ctx, "owner.2", []byte("b"), r1)
			changed("update of a key that does not exist", err)
			changed("delete of an old revision", kv.Delete(ctx, "owner.1", r1))
			ok("delete", kv.Delete(ctx, "owner.1", r2))
			r3, err := kv.Create(ctx, "owner.1", []byte("c"))
			ok("create of a deleted key", err)
			_, err = kv.Put(ctx, "member.a", []byte("m"))
			ok("put", err)
			ok("delete whatever the revision", kv.Delete(ctx, "member.a", 0))

			wctx, stop := context.WithCancel(ctx)
			w, err := kv.WatchAll(wctx)
			ok("watch", err)
			next := func() string {
				t.Helper()
				select {
				case e, open := <-w:
					switch {
					case !open:
						return "closed"
					case e == nil:
						return "synced"
					case e.Deleted:
						return e.Key + " deleted"
					}
					return fmt.Sprintf("%s=%s@%d", e.Key, e.Data, e.Revision)
				case <-time.After(10 * time.Second):
					t.Fatal("the watch delivered nothing in 10s")
				}
				return ""
			}
			for _, want := range []string{fmt.Sprintf("owner.1=c@%d", r3), "member.a deleted", "synced"} {
				if got := next(); got != want {
					t.Errorf("watch: %s, want %s", got, want)
				}
			}
			r4, err := kv.Update(ctx, "owner.1", []byte("d"), r3)
			ok("update", err)
			if got, want := next(), fmt.Sprintf("owner.1=d@%d", r4); got != want {
				t.Errorf("watch: %s, want %s", got, want)
			}
			stop()
			for got := next(); got != "closed"; got = next() {
				t.Errorf("watch after it was stopped: %s", got)
			}
		})
	}
}
