package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
)

// accountsServer is a nats-server in operator mode, as production NATS is
// often run: accounts and users are JWTs signed with nkeys, and a client
// proves who it is with a .creds file (its user JWT and nkey seed).
type accountsServer struct {
	t       *testing.T
	url     string
	account nkeys.KeyPair // signs the users of the CHAT account
}

func startAccountsServer(t *testing.T) *accountsServer {
	t.Helper()
	operator := newKey(t, nkeys.CreateOperator)
	oc := jwt.NewOperatorClaims(publicKey(t, operator))
	oc.Name = "chatpulse-test"
	resolver := &server.MemAccResolver{}
	account := func(name string, jetStream bool) string {
		kp := newKey(t, nkeys.CreateAccount)
		ac := jwt.NewAccountClaims(publicKey(t, kp))
		ac.Name = name
		if jetStream {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		signed, err := ac.Encode(operator)
		if err != nil {
			t.Fatal(err)
		}
		resolver.Store(ac.Subject, signed)
		if name == "CHAT" {
			return string(must(kp.Seed()))
		}
		return ac.Subject
	}
	system := account("SYS", false)
	chatSeed := account("CHAT", true)
	oc.SystemAccount = system
	url := natstest.Start(t, func(o *server.Options) {
		o.TrustedOperators, o.AccountResolver, o.SystemAccount = []*jwt.OperatorClaims{oc}, resolver, system
	}).URL()
	kp, err := nkeys.FromSeed([]byte(chatSeed))
	if err != nil {
		t.Fatal(err)
	}
	return &accountsServer{t: t, url: url, account: kp}
}

// creds writes a .creds file for a new user of the CHAT account, signed by
// signer (the account's key, or another), with claims set up by edit.
func (a *accountsServer) creds(name string, signer nkeys.KeyPair, edit func(*jwt.UserClaims)) string {
	t := a.t
	t.Helper()
	user := newKey(t, nkeys.CreateUser)
	uc := jwt.NewUserClaims(publicKey(t, user))
	uc.Name = name
	if edit != nil {
		edit(uc)
	}
	signed, err := uc.Encode(signer)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(signed, must(user.Seed()))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// chatpulsePermissions are the least a chatpulse user needs with
// JetStream (docs/security.md): the JetStream API, its own subjects,
// replies to its requests (inboxes) and to the requests it answers, and
// the micro service's discovery subjects.
func chatpulsePermissions(uc *jwt.UserClaims) {
	uc.Pub.Allow.Add("$JS.API.>", "chatpulse.>", "$SRV.>")
	uc.Sub.Allow.Add("_INBOX.>", "chatpulse.throttle.check", "$SRV.>")
	uc.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
}

// --nats-creds, tested for real: chatpulse logs in to an operator-mode
// server with a .creds file for a user with only the permissions docs/security.md
// lists, counts events a chat server publishes, answers a throttle check
// over NATS and keeps dead letters. Missing, foreign or expired
// credentials end the start with an error naming the problem.
func TestNATSCreds(t *testing.T) {
	a := startAccountsServer(t)
	creds := a.creds("chatpulse", a.account, chatpulsePermissions)
	tm := startMain(t, "--nats-url", a.url, "--nats-creds", creds)
	if tm.PublishURL() != a.url {
		t.Fatalf("publish URL %s", tm.PublishURL())
	}
	// startMain connected without credentials: the server refuses that.
	if _, err := nats.Connect(a.url); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Fatalf("a client without credentials: %v", err)
	}
	chat, err := nats.Connect(a.url, nats.UserCredentials(a.creds("chat-server", a.account, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer chat.Close()
	for i := range 12 {
		chat.Publish("chat.lobby.alice", fmt.Appendf(nil, `{"room":"lobby","user":"alice","text":"hi %d"}`, i))
	}
	chat.Publish("chat.lobby.alice", []byte("not json"))
	chat.Flush()
	tm.waitReceived(13)
	resp, err := chat.Request("chatpulse.throttle.check", []byte(`{"room":"lobby","user":"alice"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var answer struct{ Allowed bool }
	if err := json.Unmarshal(resp.Data, &answer); err != nil || answer.Allowed {
		t.Fatalf("check over NATS: %s %v", resp.Data, err)
	}
	js, _ := chat.JetStream()
	wait.For(t, 10*time.Second, func() error {
		info, err := js.StreamInfo("CHATPULSE_DEADLETTER")
		if err != nil {
			return err
		}
		if info.State.Msgs != 1 {
			return fmt.Errorf("%d dead letters kept, want 1", info.State.Msgs)
		}
		return nil
	})
	if got := tm.metric("chatpulse_deadletter_failed_total"); got != 0 {
		t.Fatalf("dead letters failed: %v", got)
	}

	// Core mode: no JetStream API, the events' subject instead.
	core := startMain(t, "--jetstream=false", "--nats-url", a.url, "--nats-creds", a.creds("chatpulse-core", a.account, func(uc *jwt.UserClaims) {
		uc.Pub.Allow.Add("chatpulse.>", "$SRV.>")
		uc.Sub.Allow.Add("chat.>", "chatpulse.throttle.check", "$SRV.>")
		uc.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
	}))
	chat.Publish("chat.lobby.bob", []byte(`{"room":"lobby","user":"bob"}`))
	chat.Publish("chat.lobby.bob", []byte("not json"))
	chat.Flush()
	core.waitReceived(2)
	if got := core.metric("chatpulse_deadletter_failed_total"); got != 0 {
		t.Fatalf("core mode: dead letters failed: %v", got)
	}

	other := newKey(t, nkeys.CreateAccount) // an account the server does not know
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"none":    {nil, "authorization violation"},
		"foreign": {[]string{"--nats-creds", a.creds("stranger", other, nil)}, "authorization violation"},
		"expired": {[]string{"--nats-creds", a.creds("late", a.account, func(uc *jwt.UserClaims) {
			uc.Expires = time.Now().Add(-time.Minute).Unix()
		})}, "authorization violation"},
	} {
		m := NewMain()
		m.Log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
		args := append([]string{"--http", "127.0.0.1:0", "--nats-url", a.url}, tc.args...)
		if err := m.ParseFlags(args, func(string) string { return "" }); err != nil {
			t.Fatal(err)
		}
		err := m.Run(context.Background())
		m.Close()
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), tc.want) {
			t.Errorf("%s credentials: %v, want an error saying %q", name, err, tc.want)
		}
	}
}

func newKey(t *testing.T, create func() (nkeys.KeyPair, error)) nkeys.KeyPair {
	t.Helper()
	kp, err := create()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func publicKey(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	return string(must(kp.PublicKey()))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
