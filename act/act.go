package act

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/matrix"
	"github.com/chatpulse/chatpulse/throttle"
)

// A Kind is what an act or an undo does, and the last token of the
// subject it is published on (chatpulse.act.<kind>).
type Kind string

// The kinds.
const (
	Mute   Kind = "mute"
	Unmute Kind = "unmute"
	Redact Kind = "redact"
	Lock   Kind = "lock"
	Unlock Kind = "unlock"
)

// The modes of --act-mode.
const (
	ModeAct    = "act"    // act on the homeserver
	ModeShadow = "shadow" // decide, publish and audit what it would do; touch nothing
)

// An Act is one act or undo as it is published on chatpulse.act.<kind>
// and kept in the audit stream.
type Act struct {
	Kind   Kind   `json:"kind"`
	Room   string `json:"room"`
	User   string `json:"user,omitempty"`
	Policy string `json:"policy"`
	// Answered are the ids of the chat events it answers: the message
	// that crossed, the message redacted.
	Answered []string `json:"answered,omitempty"`
	// Event is the id of the event the homeserver made of it.
	Event string `json:"event,omitempty"`
	// Until is when a mute or a lock is to be undone.
	Until *chat.Time `json:"until,omitempty"`
	// Shadow: --act-mode shadow; this is what it would have done.
	Shadow bool `json:"shadow,omitempty"`
	// Skipped says why nothing was changed: moderator, bot, exempt (never
	// acted on), unchanged (nothing to do: the user could not post, the
	// room was not open; for an undo, someone else changed it since),
	// no_power (the bot lacks it in the room), failed (Error says).
	Skipped string    `json:"skipped,omitempty"`
	Error   string    `json:"error,omitempty"`
	At      chat.Time `json:"at"`
}

// A Homeserver is what acting needs of the chat system: a matrix.Client.
type Homeserver interface {
	WhoAmI(ctx context.Context) (string, error)
	PowerLevels(ctx context.Context, room string) (*matrix.PowerLevels, error)
	SetPowerLevels(ctx context.Context, room string, pl *matrix.PowerLevels) (string, error)
	JoinRules(ctx context.Context, room string) (json.RawMessage, error)
	SetJoinRules(ctx context.Context, room string, content json.RawMessage) (string, error)
	Redact(ctx context.Context, room, event, reason, txnID string) (string, error)
}

// A Bucket keeps the records of the undos due: bus.Bucket (the
// moderation bucket's act.* keys).
type Bucket interface {
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	Delete(ctx context.Context, key string, last uint64) error
}

// Config is an Actor's.
type Config struct {
	Mode       string // ModeAct (also when empty) or ModeShadow
	Queue      int    // the most jobs waiting (--act-queue)
	Homeserver Homeserver
	// Bucket keeps the undos due; nil: they are kept in memory only, and
	// lost with the process (without JetStream).
	Bucket Bucket
	// Publish publishes an act on chatpulse.act.<kind> under id, kept in
	// the audit stream (bus.Bus.Act).
	Publish func(ctx context.Context, kind, id string, data []byte) error
	// Policies are the policies in force (who they exempt).
	Policies func() []throttle.Policy
	// Rooms are the rooms where user posted within d before now: where
	// a policy of scope user mutes them.
	Rooms func(user string, d time.Duration, now int64) []string
	// Owns reports whether this instance holds part (a group's partition
	// stage), so undoes what was done for it; nil: all.
	Owns func(part string) bool
	Now  func() time.Time
	Log  *slog.Logger
	Reg  prometheus.Registerer
}

// DefaultQueue is --act-queue's default.
const DefaultQueue = 10000

// An Actor turns messages over policies that act into changes on the
// homeserver, and undoes them when due.
type Actor struct {
	cfg  Config
	q    *queue
	wake chan struct{} // the records changed: the scheduler looks again
	m    *metrics

	mu       sync.Mutex
	recs     map[string]*record // by key
	rooms    map[string]*room   // what the bot can do where
	skipped  map[string]int64   // mutes found needless (a moderator): until when, by key
	redacted recent             // the events last redacted
	bot      string             // the bot's user id, once known
}

// New makes an Actor; nothing happens until Run.
func New(cfg Config) *Actor {
	if cfg.Mode == "" {
		cfg.Mode = ModeAct
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Owns == nil {
		cfg.Owns = func(string) bool { return true }
	}
	a := &Actor{cfg: cfg, q: newQueue(cfg.Queue), wake: make(chan struct{}, 1),
		recs: map[string]*record{}, rooms: map[string]*room{}, skipped: map[string]int64{}}
	a.m = newMetrics(a, cfg.Reg)
	a.q.onDrop = func(k Kind) { a.m.acted(k, "dropped") }
	return a
}

// shadow reports whether the Actor only says what it would do.
func (a *Actor) shadow() bool { return a.cfg.Mode == ModeShadow }

// Over takes a message over a policy that acts, from part (a group's
// partition stage; "" standalone). It is called on the pipeline's
// throttle goroutine: it decides and queues, and never waits.
func (a *Actor) Over(part string, o throttle.Over) {
	now := a.cfg.Now().UnixMilli()
	for _, k := range o.Acts {
		switch k {
		case throttle.ActMute:
			if o.User == "" || o.Denied <= now {
				continue // nobody to mute, or no longer denied (an old message read late)
			}
			if o.Room != "" {
				a.mute(part, o, o.Room)
			} else {
				a.muteEverywhere(part, o)
			}
		case throttle.ActRedact:
			if o.Event != "" {
				a.redact(o)
			}
		case throttle.ActLock:
			if o.First && o.Room != "" && o.At+o.LockFor.Milliseconds() > now {
				a.lock(part, o)
			}
		}
	}
}

// recordKey is where the undo of a mute (user set) or a lock is kept.
func recordKey(kind Kind, room, user string) string {
	enc := base64.RawURLEncoding.EncodeToString
	if user == "" {
		return bus.ActKeys + string(kind) + "." + enc([]byte(room))
	}
	return bus.ActKeys + string(kind) + "." + enc([]byte(room)) + "." + enc([]byte(user))
}

// exempt reports whether policy (by name) exempts user.
func (a *Actor) exempt(policy, user string) bool {
	if a.cfg.Policies == nil {
		return false
	}
	for _, p := range a.cfg.Policies() {
		if p.Name != policy {
			continue
		}
		return slices.ContainsFunc(p.ExemptUsers, func(g string) bool {
			cg, err := chat.CompileGlob(g)
			return err == nil && cg.Match(user)
		})
	}
	return false
}

// kick wakes the scheduler.
func (a *Actor) kick() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}
