// Command sliced_goload drives one unary gRPC method from a Go client that
// does per call what ghz does: it renders the request from a Go text/template
// of JSON (call data: request number, worker, timestamps, a UUID), parses the
// JSON into a dynamic message built from the server's reflection, invokes the
// method over grpc-go and hands each result to one collecting goroutine.
//
// DESIGN §7's throughput target is a ratio to the health check measured with
// ghz, and ghz is not packaged for Debian. This is the closest stand-in the
// machine can build from Debian's packages: the same language, gRPC library
// and per-call steps. It is lighter than ghz (Debian has no jhump/protoreflect,
// so its messages are dynamicpb's, and it keeps no per-call report): on this
// class of machine its health-check ceiling is about twice ghz's, so ratios
// against it read lower than ghz's did (bench/RESULTS.md).
//
//	sliced_goload -target 127.0.0.1:PORT -call grpc.health.v1.Health/Check -c 64 -z 5s
//	sliced_goload -target ... -call sliced.v1.Placement/CreatePlacementGroup \
//	  -d '{"name":"g{{.RequestNumber}}","bundles":[{"resources":{"CPU":1}}]}'
//
// It prints one JSON object: calls, rps, latency percentiles and maximum in ms, counts
// per status code and the client's own CPU seconds.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/ioutil"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/template"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

var (
	target      = flag.String("target", "", "server address HOST:PORT (required)")
	call        = flag.String("call", "", "method: package.Service/Method or package.Service.Method (required)")
	data        = flag.String("d", "{}", "request as JSON, a Go template over the call data; @FILE reads a file")
	concurrency = flag.Int("c", 16, "concurrent closed-loop workers")
	duration    = flag.Duration("z", 5*time.Second, "measured duration")
	warmup      = flag.Duration("warmup", 500*time.Millisecond, "run before measuring, not counted")
	total       = flag.Int("n", 0, "stop after this many calls instead (no warm-up); 0: run for -z")
	connections = flag.Int("connections", 1, "HTTP/2 connections the workers share (ghz's default: 1)")
	timeout     = flag.Duration("timeout", 20*time.Second, "deadline of each call")
)

// callData is what a request template can use; ghz offers the same names.
type callData struct {
	WorkerID           string
	RequestNumber      int64
	FullyQualifiedName string
	MethodName         string
	ServiceName        string
	InputName          string
	OutputName         string
	Timestamp          string
	TimestampUnix      int64
	TimestampUnixMilli int64
	TimestampUnixNano  int64
	UUID               string
}

// codec marshals with the protobuf API v2, which dynamic messages need (the
// default codec of Debian's grpc-go goes through the API v1 tables).
type codec struct{}

func (codec) Marshal(v interface{}) ([]byte, error) { return proto.Marshal(v.(proto.Message)) }
func (codec) Unmarshal(b []byte, v interface{}) error {
	return proto.Unmarshal(b, v.(proto.Message))
}
func (codec) Name() string { return "proto" }

type result struct {
	start   time.Time
	latency time.Duration
	code    codes.Code
	message string
}

type summary struct {
	Method       string         `json:"method"`
	Concurrency  int            `json:"concurrency"`
	Calls        int            `json:"calls"`
	Seconds      float64        `json:"seconds"`
	Rps          float64        `json:"rps"`
	P50Ms        float64        `json:"p50_ms"`
	P99Ms        float64        `json:"p99_ms"`
	P999Ms       float64        `json:"p999_ms"`
	MaxMs        float64        `json:"max_ms"`
	Codes        map[string]int `json:"codes"`
	FirstError   string         `json:"first_error,omitempty"`
	ClientCPUSec float64        `json:"client_cpu_seconds"`
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "sliced_goload: "+format+"\n", args...)
	os.Exit(2)
}

// methodName splits "pkg.Svc/Method" or "pkg.Svc.Method".
func methodName(s string) (service, method string, err error) {
	if i := strings.LastIndex(s, "/"); i > 0 {
		return s[:i], s[i+1:], nil
	}
	if i := strings.LastIndex(s, "."); i > 0 {
		return s[:i], s[i+1:], nil
	}
	return "", "", fmt.Errorf("-call %q: want package.Service/Method", s)
}

// resolve asks the server's reflection service (v1alpha) for the file that
// defines service and every file it imports, and finds the method there.
func resolve(ctx context.Context, conn *grpc.ClientConn, service, method string) (protoreflect.MethodDescriptor, error) {
	stream, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, fmt.Errorf("reflection: %v", err)
	}
	defer stream.CloseSend()
	files := map[string]*descriptorpb.FileDescriptorProto{}
	ask := func(req *rpb.ServerReflectionRequest) error {
		if err := stream.Send(req); err != nil {
			return err
		}
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if e := resp.GetErrorResponse(); e != nil {
			return fmt.Errorf("%s", e.GetErrorMessage())
		}
		for _, raw := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
			fd := &descriptorpb.FileDescriptorProto{}
			if err := proto.Unmarshal(raw, fd); err != nil {
				return err
			}
			files[fd.GetName()] = fd
		}
		return nil
	}
	if err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: service}}); err != nil {
		return nil, fmt.Errorf("reflection: service %q: %v", service, err)
	}
	for missing := true; missing; {
		missing = false
		for _, fd := range files {
			for _, dep := range fd.GetDependency() {
				if _, ok := files[dep]; ok {
					continue
				}
				missing = true
				if err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileByFilename{FileByFilename: dep}}); err != nil {
					return nil, fmt.Errorf("reflection: file %q: %v", dep, err)
				}
			}
		}
	}
	set := &descriptorpb.FileDescriptorSet{}
	for _, fd := range files {
		set.File = append(set.File, fd)
	}
	reg, err := protodesc.NewFiles(set)
	if err != nil {
		return nil, fmt.Errorf("descriptors: %v", err)
	}
	d, err := reg.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return nil, fmt.Errorf("service %q: %v", service, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("%q is not a service", service)
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		return nil, fmt.Errorf("service %q has no method %q", service, method)
	}
	if md.IsStreamingClient() || md.IsStreamingServer() {
		return nil, fmt.Errorf("%s/%s is streaming; only unary methods are driven", service, method)
	}
	return md, nil
}

// request renders the template for one call and parses it into a message,
// as ghz does for JSON data (no caching: the template may differ per call).
func request(md protoreflect.MethodDescriptor, text string, worker string, n int64) (proto.Message, error) {
	now := time.Now()
	id, _ := uuid.NewRandom()
	cd := &callData{
		WorkerID:           worker,
		RequestNumber:      n,
		FullyQualifiedName: string(md.FullName()),
		MethodName:         string(md.Name()),
		ServiceName:        string(md.Parent().Name()),
		InputName:          string(md.Input().Name()),
		OutputName:         string(md.Output().Name()),
		Timestamp:          now.Format(time.RFC3339),
		TimestampUnix:      now.Unix(),
		TimestampUnixMilli: now.UnixNano() / 1e6,
		TimestampUnixNano:  now.UnixNano(),
		UUID:               id.String(),
	}
	tmpl, err := template.New("data").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("-d: %v", err)
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, cd); err != nil {
		return nil, fmt.Errorf("-d: %v", err)
	}
	msg := dynamicpb.NewMessage(md.Input())
	if err := protojson.Unmarshal(buf.Bytes(), msg); err != nil {
		return nil, fmt.Errorf("-d: not a %s: %v", md.Input().FullName(), err)
	}
	return msg, nil
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return float64(sorted[i]) / 1e6
}

func main() {
	flag.Parse()
	if *target == "" || *call == "" {
		fail("-target and -call are required (see -h)")
	}
	if *concurrency < 1 || *connections < 1 {
		fail("-c and -connections must be at least 1")
	}
	text := *data
	if strings.HasPrefix(text, "@") {
		b, err := ioutil.ReadFile(text[1:])
		if err != nil {
			fail("-d %s: %v", text, err)
		}
		text = string(b)
	}
	service, method, err := methodName(*call)
	if err != nil {
		fail("%v", err)
	}
	conns := make([]*grpc.ClientConn, *connections)
	for i := range conns {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		conns[i], err = grpc.DialContext(ctx, *target, grpc.WithInsecure(), grpc.WithBlock())
		cancel()
		if err != nil {
			fail("connect %s: %v", *target, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	md, err := resolve(ctx, conns[0], service, method)
	cancel()
	if err != nil {
		fail("%v", err)
	}
	fullMethod := "/" + service + "/" + method
	// Fail fast on a template or JSON that does not fit the method.
	if _, err := request(md, text, "check", 0); err != nil {
		fail("%v", err)
	}

	results := make(chan result, 1024)
	var all []result
	collected := make(chan struct{})
	go func() {
		for r := range results {
			all = append(all, r)
		}
		close(collected)
	}()

	begin := time.Now()
	measureFrom := begin.Add(*warmup)
	stopAt := measureFrom.Add(*duration)
	if *total > 0 {
		measureFrom = begin
		stopAt = time.Time{}
	}
	var next int64
	var nextMu sync.Mutex
	take := func() (int64, bool) {
		nextMu.Lock()
		defer nextMu.Unlock()
		if *total > 0 && next >= int64(*total) {
			return 0, false
		}
		next++
		return next - 1, true
	}
	cpuBefore := cpuSeconds()
	var wg sync.WaitGroup
	for w := 0; w < *concurrency; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			conn := conns[w%len(conns)]
			worker := fmt.Sprintf("w%d", w)
			for {
				if !stopAt.IsZero() && time.Now().After(stopAt) {
					return
				}
				n, ok := take()
				if !ok {
					return
				}
				in, err := request(md, text, worker, n)
				if err != nil {
					fail("%v", err)
				}
				out := dynamicpb.NewMessage(md.Output())
				cctx, ccancel := context.WithTimeout(context.Background(), *timeout)
				start := time.Now()
				err = conn.Invoke(cctx, fullMethod, in, out, grpc.ForceCodec(codec{}))
				lat := time.Since(start)
				ccancel()
				st, _ := status.FromError(err)
				results <- result{start: start, latency: lat, code: st.Code(), message: st.Message()}
			}
		}(w)
	}
	wg.Wait()
	end := time.Now()
	cpu := cpuSeconds() - cpuBefore
	close(results)
	<-collected

	s := summary{Method: strings.TrimPrefix(fullMethod, "/"), Concurrency: *concurrency, Codes: map[string]int{}}
	windowEnd := stopAt
	if windowEnd.IsZero() || end.Before(windowEnd) {
		windowEnd = end
	}
	var lats []time.Duration
	for _, r := range all {
		done := r.start.Add(r.latency)
		if r.start.Before(measureFrom) || done.After(windowEnd) {
			continue
		}
		lats = append(lats, r.latency)
		s.Codes[r.code.String()]++
		if r.code != codes.OK && s.FirstError == "" {
			s.FirstError = r.code.String() + ": " + r.message
		}
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	s.Calls = len(lats)
	s.Seconds = windowEnd.Sub(measureFrom).Seconds()
	if s.Seconds > 0 {
		s.Rps = float64(s.Calls) / s.Seconds
	}
	s.P50Ms = percentile(lats, 0.50)
	s.P99Ms = percentile(lats, 0.99)
	s.P999Ms = percentile(lats, 0.999)
	if len(lats) > 0 {
		s.MaxMs = float64(lats[len(lats)-1]) / float64(time.Millisecond)
	}
	s.ClientCPUSec = cpu
	out, _ := json.Marshal(s)
	fmt.Println(string(out))
}
