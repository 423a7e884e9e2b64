//go:build ignore

// A one-broker franz-go kfake on 127.0.0.1:-port, for bench/share_scale.py (bench/README.md says
// how to build it). Runs until SIGTERM / SIGINT.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

type configs map[string]string

func (c configs) String() string { return "" }

func (c configs) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("expected key=value, got %q", s)
	}
	c[k] = v
	return nil
}

func main() {
	port := flag.Int("port", 9092, "port on 127.0.0.1")
	bc := configs{}
	flag.Var(bc, "c", "broker config key=value (repeatable)")
	flag.Parse()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(*port), kfake.AllowAutoTopicCreation()}
	if len(bc) > 0 {
		opts = append(opts, kfake.BrokerConfigs(bc))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(c.ListenAddrs())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	<-sigs
	c.Close()
}
