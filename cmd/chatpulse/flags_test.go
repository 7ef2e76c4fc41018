package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFlagsAndEnvironment(t *testing.T) {
	env := map[string]string{"CHATPULSE_WINDOWS": "10s:1s,2m", "CHATPULSE_JETSTREAM": "false", "CHATPULSE_HTTP": "127.0.0.1:9999"}
	m := NewMain()
	if err := m.ParseFlags([]string{"--http", "127.0.0.1:7777", "--allowed-origins", "https://a.example, https://b.example"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	c := m.Config
	if len(c.Windows) != 2 || c.Windows[0].Name != "10s" || c.JetStream || c.HTTP != "127.0.0.1:7777" || len(c.AllowedOrigins) != 2 {
		t.Fatalf("config: %+v", c)
	}
	if c.NATSListen != "127.0.0.1:4222" || c.DataDir != "./chatpulse-data" || c.Stream != "CHAT" || c.Subject != "chat.>" || c.MaxSkew != 5*time.Second || c.PushInterval != time.Second {
		t.Fatalf("defaults: %+v", c)
	}
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"bad window":   {[]string{"--windows", "1x"}, nil, `--windows: window "1x": size: "1x" is not a duration (examples: 90s, 5m, 1h, 7d)`},
		"bad env":      {nil, map[string]string{"CHATPULSE_MAX_SKEW": "soon"}, `CHATPULSE_MAX_SKEW="soon": parse error`},
		"stray arg":    {[]string{"extra"}, nil, `unexpected argument "extra" (flags start with --; see --help)`},
		"unknown flag": {[]string{"--nope"}, nil, "flag provided but not defined: -nope"},
	} {
		m := NewMain()
		m.Stderr = &bytes.Buffer{}
		err := m.ParseFlags(tc.args, func(k string) string { return tc.env[k] })
		var usage *UsageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want a usage error containing %q", name, err, tc.want)
		}
	}
}

// Bad flags and unusable addresses or data directories end the binary with
// one line naming the problem and exit status 2.
func TestExitStatus(t *testing.T) {
	bin := buildBinary(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	file := filepath.Join(t.TempDir(), "a-file")
	os.WriteFile(file, nil, 0o644)
	free := fmt.Sprint("127.0.0.1:", freePort(t))
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"bad flag":         {[]string{"--windows", "1m:7s"}, "--windows"},
		"http taken":       {[]string{"--http", taken.Addr().String(), "--nats-listen", free}, "--http " + taken.Addr().String()},
		"nats taken":       {[]string{"--http", "127.0.0.1:0", "--nats-listen", taken.Addr().String()}, "--nats-listen " + taken.Addr().String()},
		"data dir":         {[]string{"--http", "127.0.0.1:0", "--nats-listen", free, "--data-dir", filepath.Join(file, "sub")}, "--data-dir"},
		"policies":         {[]string{"--http", "127.0.0.1:0", "--nats-listen", free, "--policies", filepath.Join(t.TempDir(), "none.yaml")}, "--policies"},
		"policies kv core": {[]string{"--jetstream=false", "--policies", "kv:limits/chat"}, "--policies kv:limits/chat: a key-value key needs JetStream"},
		"policies kv":      {[]string{"--http", "127.0.0.1:0", "--nats-listen", free, "--data-dir", t.TempDir(), "--policies", "kv:limits/chat"}, "kv:limits/chat: no such key-value bucket or key: bucket limits not found"},
		"push interval":    {[]string{"--push-interval", "1ms"}, "--push-interval: at least 50ms"},
		"unknown flag":     {[]string{"--nope"}, "flag provided but not defined: -nope (see --help)"},
		"token file":       {[]string{"--auth-token-file", filepath.Join(file, "none")}, "--auth-token-file: open"},
		"certificate":      {[]string{"--http", "127.0.0.1:0", "--nats-listen", free, "--tls-cert", file, "--tls-key", file}, "--tls-cert, --tls-key: tls: failed to find any PEM data"},
	} {
		exitsWithUsage(t, bin, name, tc.args, tc.want)
	}
}

// The flags of the Security section are checked when chatpulse starts.
func TestSecurityFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte("  from-file \n"), 0o600)
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	env := map[string]string{"CHATPULSE_AUTH_TOKEN_FILE": file, "CHATPULSE_ALLOWED_HOSTS": "a.example,b.example", "CHATPULSE_METRICS_AUTH": "false"}
	m := NewMain()
	if err := m.ParseFlags(nil, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c := m.Config; c.AuthToken != "from-file" || c.MetricsAuth || fmt.Sprint(c.AllowedHosts) != "[a.example b.example]" {
		t.Fatalf("config: %+v", c)
	}
	env = map[string]string{"CHATPULSE_AUTH_TOKEN": "from-env", "CHATPULSE_TLS_CERT": "c.pem", "CHATPULSE_TLS_KEY": "k.pem"}
	m = NewMain()
	if err := m.ParseFlags([]string{"--tls-key", "key.pem", "--allowed-hosts", "*"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c := m.Config; c.AuthToken != "from-env" || !c.MetricsAuth || c.TLSCert != "c.pem" || c.TLSKey != "key.pem" || fmt.Sprint(c.AllowedHosts) != "[*]" {
		t.Fatalf("config: %+v", c)
	}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"both tokens":    {[]string{"--auth-token", "a", "--auth-token-file", file}, "--auth-token and --auth-token-file: give one"},
		"missing file":   {[]string{"--auth-token-file", file + ".nope"}, "--auth-token-file: open"},
		"empty file":     {[]string{"--auth-token-file", empty}, "--auth-token-file " + empty + ": empty"},
		"space in token": {[]string{"--auth-token", "a b"}, "auth token: only visible ASCII characters, no spaces (byte 1 is not)"},
		"cert alone":     {[]string{"--tls-cert", file}, "--tls-cert and --tls-key go together"},
		"creds alone":    {[]string{"--nats-creds", file}, "--nats-creds: the embedded server has no accounts"},
		"missing creds":  {[]string{"--nats-url", "nats://127.0.0.1:1", "--nats-creds", file + ".nope"}, "--nats-creds: open"},
	} {
		err := NewMain().ParseFlags(tc.args, func(string) string { return "" })
		var usage *UsageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a usage error containing %q", name, err, tc.want)
		}
	}
	// A certificate that cannot be loaded ends the start with a usage error.
	m = NewMain()
	m.ParseFlags([]string{"--tls-cert", file, "--tls-key", file}, func(string) string { return "" })
	err := m.Run(t.Context())
	m.Close()
	var usage *UsageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "--tls-cert, --tls-key:") {
		t.Fatalf("bad certificate: %v", err)
	}
}

// exitsWithUsage runs bin with args and checks that it ends with exit
// status 2 and one line on stderr naming want; name says which case.
func exitsWithUsage(t *testing.T, bin, name string, args []string, want string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("%s: %v, want exit status 2; stderr: %s", name, err, stderr.String())
		return
	}
	out := strings.TrimSpace(stderr.String())
	if strings.Count(out, "\n") != 0 || !strings.HasPrefix(out, "chatpulse: ") || !strings.Contains(out, want) {
		t.Errorf("%s: stderr %q, want one line naming %q", name, out, want)
	}
}
