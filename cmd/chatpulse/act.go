package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/act"
	"github.com/chatpulse/chatpulse/engine"
	"github.com/chatpulse/chatpulse/matrix"
)

// Acting on the chat system (docs/contract.md section 14): --act matrix
// has chatpulse mute, redact and lock on the Matrix homeserver whose
// events it reads, as the policies' acts say.

// checkAct checks the flags of acting; set says whether a flag was
// given.
func (c *Config) checkAct(set func(name string) bool) error {
	given := func(names ...string) string {
		for _, n := range names {
			if set(n) {
				return n
			}
		}
		return ""
	}
	switch {
	case c.Act == "":
		if f := given("matrix-homeserver", "matrix-token-file", "act-queue", "act-mode"); f != "" {
			return usagef("--%s: only with --act matrix", f)
		}
		return nil
	case c.Act != "matrix":
		return usagef("--act: matrix, or nothing; got %q", c.Act)
	case c.Input == nil || c.Input.Name() != "matrix":
		return usagef("--act matrix: chatpulse acts on the homeserver whose events it reads: needs --input matrix")
	case c.MatrixHomeserver == "":
		return usagef("--act matrix: needs --matrix-homeserver, the homeserver's client-server API URL")
	case c.MatrixTokenFile == "":
		return usagef("--act matrix: needs --matrix-token-file, a file holding the bot's access token")
	case c.ActQueue < 1:
		return usagef("--act-queue: at least 1, got %d", c.ActQueue)
	case c.ActMode != act.ModeAct && c.ActMode != act.ModeShadow:
		return usagef("--act-mode: act or shadow, got %q", c.ActMode)
	}
	if _, err := readToken(c.MatrixTokenFile); err != nil {
		return usagef("--matrix-token-file: %v", err)
	}
	if _, err := matrix.NewClient(c.MatrixHomeserver, func() string { return "" }, nil); err != nil {
		return usagef("--matrix-homeserver: %v", err)
	}
	return nil
}

// readToken reads a token file: one line, trimmed, not empty.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("%s: empty", path)
	}
	return t, nil
}

// actor is what --act matrix adds to Main: the Actor, and the bot's
// token, read again on SIGHUP.
type actor struct {
	*act.Actor
	token atomic.Pointer[string]
	parts parts
}

// newActor makes the Actor of --act matrix, or nil without it: it acts
// through the homeserver with the bot's token, keeps its undos in the
// moderation bucket, and undoes those of the parts owns says this
// instance holds.
func (m *Main) newActor(reg prometheus.Registerer, ps parts) (*actor, error) {
	c := &m.Config
	if c.Act == "" {
		return nil, nil
	}
	a := &actor{parts: ps}
	t, err := readToken(c.MatrixTokenFile)
	if err != nil {
		return nil, usagef("--matrix-token-file: %v", err)
	}
	a.token.Store(&t)
	client, err := matrix.NewClient(c.MatrixHomeserver, func() string { return *a.token.Load() }, nil)
	if err != nil {
		return nil, usagef("--matrix-homeserver: %v", err)
	}
	a.Actor = act.New(act.Config{
		Mode: c.ActMode, Queue: c.ActQueue, Homeserver: client, Bucket: actRecords{m.moderation},
		Publish:  func(ctx context.Context, kind, id string, data []byte) error { return m.bus.Act(ctx, kind, id, data) },
		Policies: m.policies.list, Rooms: m.userRooms, Owns: ps.owns, Now: m.Now, Log: m.Log, Reg: reg,
	})
	m.moderation.Acts = a.Kept
	return a, nil
}

// actRecords keeps an Actor's records in the moderation bucket, once
// Moderation has it (Attach); without JetStream it keeps nothing.
type actRecords struct{ m *engine.Moderation }

func (r actRecords) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	b := r.m.Bucket()
	if b == nil {
		return 0, nil
	}
	return b.Put(ctx, key, value)
}

func (r actRecords) Delete(ctx context.Context, key string, last uint64) error {
	b := r.m.Bucket()
	if b == nil {
		return nil
	}
	return b.Delete(ctx, key, last)
}

// userRooms are the rooms where user posted within d before now, from
// the engine's user view: its smallest window that holds d (else the
// largest).
func (m *Main) userRooms(user string, d time.Duration, now int64) []string {
	ws := m.Config.Windows
	win := ws[len(ws)-1].Name
	for _, w := range ws {
		if w.Size >= d {
			win = w.Name
			break
		}
	}
	v, err := m.engine.User(user, win, now)
	if err != nil {
		return nil
	}
	rooms := make([]string, 0, len(v.Rooms))
	for _, r := range v.Rooms {
		rooms = append(rooms, r.Room)
	}
	return rooms
}

// rereadToken reads --matrix-token-file again on every SIGHUP, until
// chatpulse stops: a bad read keeps the token in force, and says why.
func (m *Main) rereadToken(a *actor) {
	m.onSIGHUP(func() {
		t, err := readToken(m.Config.MatrixTokenFile)
		if err != nil {
			m.Log.Warn("SIGHUP: the bot's token not read again: the one in force stays", "err", err)
			return
		}
		a.token.Store(&t)
		m.Log.Info("SIGHUP: the bot's token read again", "file", m.Config.MatrixTokenFile)
	})
}

// timeouts hands the moderators' timeouts in force to the Actor whenever
// they change, and every minute (one ends), until chatpulse stops.
func (m *Main) timeouts(a *actor) {
	book := m.moderation.Book
	ws := m.Config.Windows
	largest := ws[len(ws)-1].Size
	for _, w := range ws {
		largest = max(largest, w.Size)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-m.stop; cancel() }()
	for ctx.Err() == nil {
		rev, now := book.Rev(), m.Now().UnixMilli()
		inForce, _ := book.List(now)
		a.Timeouts(inForce, now, a.parts.of, largest)
		wait, done := context.WithTimeout(ctx, time.Minute)
		book.Await(wait, rev+1)
		done()
	}
}

// actStatus is GET /api/v1/act; nil without --act (404).
func (m *Main) actStatus() any {
	if m.actor == nil {
		return nil
	}
	return m.actor.Status()
}
