package web

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/throttle"
)

// setThrottle is a throttle.Set as the web's Throttle: the alerts of a
// consuming check are dropped.
type setThrottle struct{ *throttle.Set }

func (s setThrottle) Check(now int64, q throttle.Query) throttle.Result { return s.Set.Decide(now, q) }

func (s setThrottle) Consume(now int64, q throttle.Query, id string) throttle.Result {
	r, _, _ := s.Set.Consume(now, q, id)
	return r
}

// BenchmarkCheck is one throttle check as the NATS micro endpoint answers
// it (decode, check, encode) and as HTTP does (the whole handler), with the
// default policies, 10,000 users in 100 rooms.
func BenchmarkCheck(b *testing.B) {
	thr, err := throttle.NewSet(throttle.DefaultPolicies())
	if err != nil {
		b.Fatal(err)
	}
	s := New(newAggregator(b), setThrottle{thr}, Options{Now: func() time.Time { return testNow }})
	bodies := make([][]byte, 1024)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"room":"room-%d","user":"user-%d","text":"hi there"}`, i%100, i*7%10_000)
	}
	b.Run("nats", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			v, err := s.CheckRequest(bodies[i%len(bodies)])
			if err != nil {
				b.Fatal(err)
			}
			if err := json.NewEncoder(io.Discard).Encode(v); err != nil { // as bus answers
				b.Fatal(err)
			}
		}
	})
	http := func(b *testing.B, body func(i int) string) {
		b.ReportAllocs()
		w := httptest.NewRecorder()
		for i := range b.N {
			r := httptest.NewRequest(http.MethodPost, "/api/v1/throttle/check", strings.NewReader(body(i)))
			r.Host = "localhost"
			w.Body.Reset()
			s.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Fatal(w.Code, w.Body.String())
			}
		}
	}
	b.Run("http", func(b *testing.B) { http(b, func(i int) string { return string(bodies[i%len(bodies)]) }) })
	// Consuming, each check a new message (an id never sent before).
	b.Run("http-consume", func(b *testing.B) {
		http(b, func(i int) string {
			body := bodies[i%len(bodies)]
			return fmt.Sprintf(`%s,"consume":true,"id":"m-%d"}`, body[:len(body)-1], i)
		})
	})
}
