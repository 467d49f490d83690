// Command publish is a minimal publisher built on the client library:
// it connects to an edge broker and publishes ten stock quotes, each
// acknowledged by the broker before the next one.
//
//	go run ./examples/publish --broker 127.0.0.1:7001
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/matching"
)

func main() {
	broker := flag.String("broker", "127.0.0.1:7001", "edge broker address")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, *broker, client.Options{Publisher: "example-publisher"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for i := 1; i <= 10; i++ {
		// The PADRES form; matching.ParsePublicationJSON reads
		// {"class":"STOCK","symbol":"IBM","price":100.5} as well.
		pub, err := matching.ParsePublication(fmt.Sprintf("[class,'STOCK'],[symbol,'IBM'],[price,%d.5]", 95+i))
		if err != nil {
			log.Fatal(err)
		}
		pub.Payload = []byte("opaque bytes filters never read")
		// Publish returns once the edge broker acknowledged the
		// publication; on backpressure the client retries by itself.
		if err := c.Publish(ctx, pub); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("published %s (publisher %s, seq %d)\n", pub, c.Publisher(), i)
	}
}
