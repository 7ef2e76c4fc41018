package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/chatpulse/chatpulse/act"
	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/rolling"
)

// Config is everything the flags (and CHATPULSE_* variables) set.
type Config struct {
	NATSURL        string
	NATSListen     string
	NATSCreds      string
	DataDir        string
	Stream         string
	JetStream      bool
	Subject        string
	HTTP           string
	Windows        []rolling.Window
	MaxSkew        time.Duration
	Policies       string
	PushInterval   time.Duration
	AllowedOrigins []string
	Demo           bool
	// How payloads are read (docs/contract.md section 13): --input, with
	// --max-event-bytes applied.
	Input *ingest.Format
	// SourceStream is a stream chatpulse does not own that Stream sources.
	SourceStream string
	// How often the state is saved (docs/contract.md section 9); 0: never.
	SnapshotInterval time.Duration
	// Group mode (docs/contract.md section 8).
	Group      string
	Partitions int
	Replicas   int
	Instance   string
	// ThrottleUnowned answers a check whose key has no caught-up owner
	// (docs/contract.md section 10): allow or deny.
	ThrottleUnowned string
	// Acting on the chat system (docs/contract.md section 14): --act
	// matrix, the homeserver, the bot's token file, the queue and mode.
	Act              string
	MatrixHomeserver string
	MatrixTokenFile  string
	ActQueue         int
	ActMode          string

	// Who may use the HTTP server, and how it is served (docs/security.md).
	AllowedHosts []string
	AuthToken    string // from --auth-token or --auth-token-file
	MetricsAuth  bool
	TLSCert      string
	TLSKey       string
}

// UsageError is a problem with how chatpulse was started (a flag, an
// address, the data directory): exit status 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error { return &UsageError{fmt.Errorf(format, args...)} }

// EnvName is the environment variable that sets a flag: CHATPULSE_ and the
// flag's name in upper case, dashes as underscores.
func EnvName(flagName string) string {
	return "CHATPULSE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// ParseFlags reads the configuration from args, each flag defaulting to
// its environment variable (getenv) and then to the contract's default.
func (m *Main) ParseFlags(args []string, getenv func(string) string) error {
	fs := flag.NewFlagSet("chatpulse", flag.ContinueOnError)
	c := &m.Config
	var windows, origins, hosts, tokenFile, input string
	var maxEventBytes int
	fs.StringVar(&c.NATSURL, "nats-url", "", "connect to this NATS server instead of starting one (user:password@ and token@ work in the URL)")
	fs.StringVar(&c.NATSListen, "nats-listen", "127.0.0.1:4222", "client address of the embedded NATS server")
	fs.StringVar(&c.NATSCreds, "nats-creds", "", "NATS credentials file for --nats-url")
	fs.StringVar(&c.DataDir, "data-dir", "./chatpulse-data", "JetStream store of the embedded server")
	fs.StringVar(&c.Stream, "stream", "CHAT", "JetStream stream to read, created if missing")
	fs.BoolVar(&c.JetStream, "jetstream", true, "read a JetStream stream (false: a plain core NATS subscription, no replay)")
	fs.StringVar(&c.Subject, "subject", "chat.>", "subject filter of chat events (with --source-stream: of what is taken from it, default all)")
	fs.StringVar(&input, "input", "chatpulse", "how event payloads are read: chatpulse (its own events), matrix (a Matrix homeserver's room events, as Dendrite publishes them) or mapping:FILE (any JSON, through a mapping file)")
	fs.StringVar(&c.SourceStream, "source-stream", "", "a stream chatpulse does not own (a chat system's, such as DendriteOutputRoomEvent) for --stream to source and chatpulse to read")
	fs.IntVar(&maxEventBytes, "max-event-bytes", 0, "the largest event payload read, in bytes, with --input other than chatpulse (0: 65536, or 1048576 with --input matrix)")
	fs.StringVar(&c.HTTP, "http", "127.0.0.1:8080", "address of the HTTP API, websocket and dashboard")
	fs.StringVar(&windows, "windows", rolling.DefaultWindows, "windows, SIZE or SIZE:RESOLUTION, comma-separated")
	fs.DurationVar(&c.MaxSkew, "max-skew", 5*time.Second, "how far ahead of the wall clock an event's ts may be")
	fs.StringVar(&c.Policies, "policies", "", "throttle policies: a file (YAML), read again on SIGHUP and when it changes, or kv:BUCKET/KEY, a JetStream key-value key, watched; without it the default policies apply")
	fs.DurationVar(&c.PushInterval, "push-interval", time.Second, "how often websocket views are pushed")
	fs.StringVar(&origins, "allowed-origins", "", "comma-separated origins also allowed to open /ws")
	fs.BoolVar(&c.Demo, "demo", false, "also publish synthetic chat traffic")
	host, _ := os.Hostname()
	fs.DurationVar(&c.SnapshotInterval, "snapshot-interval", 30*time.Second, "how often to save the state to the object store CHATPULSE_SNAPSHOTS, so a restart replays only what came after (0: never; JetStream only)")
	fs.StringVar(&c.Group, "group", "", "share the work with the other instances of this group (needs JetStream); empty: standalone")
	fs.IntVar(&c.Partitions, "partitions", 64, "partitions per key (room, user) in a group; fixed for the life of the group")
	fs.IntVar(&c.Replicas, "replicas", 1, "JetStream replicas of every stream and bucket chatpulse creates (3 on a 3-node cluster)")
	fs.StringVar(&c.Instance, "instance", host, "this instance's name, unique within its group")
	fs.StringVar(&c.ThrottleUnowned, "throttle-unowned", "allow", "in a group, how a throttle check is answered while a partition it needs has no caught-up owner: allow or deny (the answer says complete: false either way)")
	fs.StringVar(&c.Act, "act", "", "act on the chat system as the policies' acts say (mute, redact, lock): matrix, with --input matrix; empty: never")
	fs.StringVar(&c.MatrixHomeserver, "matrix-homeserver", "", "with --act matrix: the homeserver's client-server API, http(s)://host:port")
	fs.StringVar(&c.MatrixTokenFile, "matrix-token-file", "", "with --act matrix: file holding the bot's access token (read again on SIGHUP)")
	fs.IntVar(&c.ActQueue, "act-queue", act.DefaultQueue, "with --act: the most acts waiting for the homeserver; a full queue drops redactions first")
	fs.StringVar(&c.ActMode, "act-mode", act.ModeAct, "with --act: act (change the homeserver) or shadow (decide, publish and audit what it would do; change nothing)")
	fs.StringVar(&hosts, "allowed-hosts", "", `comma-separated host names that requests may name in Host, besides IP addresses, localhost and the --http host ("*": any)`)
	fs.StringVar(&c.AuthToken, "auth-token", "", "bearer token that the API and the websocket need (better: --auth-token-file or the environment)")
	fs.StringVar(&tokenFile, "auth-token-file", "", "file holding the bearer token")
	fs.BoolVar(&c.MetricsAuth, "metrics-auth", true, "with a token, /metrics needs it too")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "serve HTTPS with this certificate (PEM; with --tls-key)")
	fs.StringVar(&c.TLSKey, "tls-key", "", "the private key of --tls-cert (PEM)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: chatpulse [flags]\n\nEvery flag can also be set with CHATPULSE_<FLAG> (upper case, dashes as underscores).\n\n")
		fs.PrintDefaults()
	}

	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(EnvName(f.Name)); v != "" && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %v", EnvName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		return &UsageError{envErr}
	}
	// Errors are one line, from main; the flag list only on --help.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fs.SetOutput(m.Stderr)
			fs.Usage()
			return err
		}
		return usagef("%v (see --help)", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (flags start with --; see --help)", fs.Arg(0))
	}
	ws, err := rolling.ParseWindows(windows)
	if err != nil {
		return usagef("--windows: %v", err)
	}
	c.Windows = ws
	if err := c.parseInput(fs, input, maxEventBytes); err != nil {
		return err
	}
	switch {
	case c.MaxSkew < 0:
		return usagef("--max-skew: must not be negative, got %v", c.MaxSkew)
	case c.PushInterval < 50*time.Millisecond:
		return usagef("--push-interval: at least 50ms, got %v", c.PushInterval)
	case c.Subject == "":
		return usagef("--subject: empty")
	case c.JetStream && c.Stream == "":
		return usagef("--stream: empty")
	case c.SnapshotInterval < 0:
		return usagef("--snapshot-interval: must not be negative, got %v", c.SnapshotInterval)
	case c.Group != "" && !c.JetStream:
		return usagef("--group %s: a group needs JetStream; drop --jetstream=false", c.Group)
	case c.Partitions < 1 || c.Partitions > 1024:
		return usagef("--partitions: 1 to 1024, got %d", c.Partitions)
	case strings.HasPrefix(c.Policies, kvPrefix) && !c.JetStream:
		return usagef("--policies %s: a key-value key needs JetStream; drop --jetstream=false", c.Policies)
	case c.Replicas < 1 || c.Replicas > 5:
		return usagef("--replicas: 1 to 5, got %d", c.Replicas)
	case c.Group != "" && c.Instance == "":
		return usagef("--instance: empty (and no host name to default to)")
	case c.ThrottleUnowned != "allow" && c.ThrottleUnowned != "deny":
		return usagef("--throttle-unowned: allow or deny, got %q", c.ThrottleUnowned)
	}
	c.AllowedOrigins = list(origins)
	c.AllowedHosts = list(hosts)
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	fs.VisitAll(func(f *flag.Flag) { given[f.Name] = given[f.Name] || getenv(EnvName(f.Name)) != "" })
	if err := c.checkAct(func(name string) bool { return given[name] }); err != nil {
		return err
	}
	return c.checkSecurity(tokenFile)
}

// parseInput reads --input, --max-event-bytes and --source-stream
// (docs/contract.md section 13). With --source-stream, --subject filters what is
// taken of that stream, all of it unless given; in a group, it is where
// the events are filed, and all of the stream is taken.
func (c *Config) parseInput(fs *flag.FlagSet, input string, maxEventBytes int) error {
	f, err := ingest.ParseInput(input)
	if err != nil {
		return usagef("--input: %v", err)
	}
	if maxEventBytes != 0 {
		if f, err = f.WithMaxPayload(maxEventBytes); err != nil {
			return usagef("--max-event-bytes: %v", err)
		}
	}
	c.Input = f
	subjectGiven := false
	fs.Visit(func(fl *flag.Flag) { subjectGiven = subjectGiven || fl.Name == "subject" })
	switch {
	case c.SourceStream == "":
	case !c.JetStream:
		return usagef("--source-stream %s: sourcing needs JetStream; drop --jetstream=false", c.SourceStream)
	case c.SourceStream == c.Stream:
		return usagef("--source-stream %s: the stream chatpulse reads (--stream) cannot source itself", c.SourceStream)
	case c.Group != "" && c.SourceStream == bus.SourceCopy(c.Stream):
		return usagef("--source-stream %s: in a group, that is the stream that sources it (--stream and _SOURCE); name another --stream", c.SourceStream)
	case c.Group != "":
		// A group files the events of the stream on --subject's
		// chat.<room>.<user>, and takes all of it.
	case !subjectGiven:
		c.Subject = ">"
	}
	if c.Group != "" && !f.Native() && c.SourceStream == "" {
		return usagef("--input %s with --group: a group reads a chat system's events from its stream; name it with --source-stream", f.Name())
	}
	return nil
}

// list splits a comma-separated flag, dropping empty entries.
func list(flag string) []string {
	var l []string
	for _, v := range strings.Split(flag, ",") {
		if v = strings.TrimSpace(v); v != "" {
			l = append(l, v)
		}
	}
	return l
}

// checkSecurity reads the token file and checks the flags that
// docs/security.md describes.
func (c *Config) checkSecurity(tokenFile string) error {
	switch {
	case tokenFile != "" && c.AuthToken != "":
		return usagef("--auth-token and --auth-token-file: give one")
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return usagef("--tls-cert and --tls-key go together")
	case c.NATSCreds != "" && c.NATSURL == "":
		return usagef("--nats-creds: the embedded server has no accounts; it is for --nats-url")
	}
	if c.NATSCreds != "" {
		if _, err := os.ReadFile(c.NATSCreds); err != nil {
			return usagef("--nats-creds: %v", err)
		}
	}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return usagef("--auth-token-file: %v", err)
		}
		c.AuthToken = strings.TrimSpace(string(b))
		if c.AuthToken == "" {
			return usagef("--auth-token-file %s: empty", tokenFile)
		}
	}
	// A header carries the token: visible ASCII only.
	if i := strings.IndexFunc(c.AuthToken, func(r rune) bool { return r <= ' ' || r >= 0x7f }); i >= 0 {
		return usagef("auth token: only visible ASCII characters, no spaces (byte %d is not)", i)
	}
	return nil
}
