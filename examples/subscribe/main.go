// Command subscribe is a minimal subscriber built on the client library:
// it subscribes to IBM quotes above 100 and prints what it receives until
// interrupted.
//
//	go run ./examples/subscribe --broker 127.0.0.1:7003
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/matching"
)

func main() {
	broker := flag.String("broker", "127.0.0.1:7001", "edge broker address")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c, err := client.Connect(ctx, *broker, client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	filter, err := matching.ParseFilter("[class,eq,'STOCK'],[symbol,eq,'IBM'],[price,>,100]")
	if err != nil {
		log.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, filter)
	if err != nil {
		log.Fatal(err)
	}
	// Deliveries may flow as soon as the edge broker accepted the
	// subscription; the guarantees (no loss, exactly once, per-publisher
	// order) hold from the overlay-wide confirmation on.
	if err := sub.WaitConfirmed(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("subscription", sub.ID(), "confirmed")
	for {
		select {
		case d, ok := <-sub.C:
			if !ok {
				log.Fatalf("subscription ended: %v", sub.Err())
			}
			if d.Gap != nil {
				fmt.Printf("gap: %s/%d %d..%d may be lost\n", d.Gap.Source.Publisher, d.Gap.Source.Epoch, d.Gap.From, d.Gap.To)
				continue
			}
			fmt.Printf("%s %v (%v after publication)\n", d.Pub, matching.Publication{Attrs: d.Attrs}, d.ReceivedAt.Sub(d.PublishedAt))
		case <-ctx.Done():
			return
		}
	}
}
