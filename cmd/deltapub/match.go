package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/deltapub/deltapub/matching"
)

const matchAbout = `Prints "match" (exit 0) or "no match" (exit 1); malformed input exits 2
with the error on stderr. --filter is a subscription in PADRES syntax,
e.g. [class,eq,'STOCK'],[price,>,100]; --pub is a publication in PADRES syntax,
[class,'STOCK'],[price,120.5], or JSON, {"class":"STOCK","price":120.5}.
`

func matchCmd(fs *flag.FlagSet) func([]string) int {
	filter := fs.String("filter", "", "subscription filter (PADRES syntax)")
	pub := fs.String("pub", "", "publication (PADRES syntax or JSON)")
	explain := fs.Bool("explain", false, "say which predicate failed")
	return func([]string) int {
		if *filter == "" || *pub == "" {
			fmt.Fprintln(os.Stderr, "deltapub match: --filter and --pub are required")
			return 2
		}
		f, err := matching.ParseFilter(*filter)
		if err != nil {
			fmt.Fprintf(os.Stderr, "deltapub match: --filter: %v\n", err)
			return 2
		}
		var p matching.Publication
		if strings.HasPrefix(strings.TrimSpace(*pub), "{") {
			p, err = matching.ParsePublicationJSON([]byte(*pub))
		} else {
			p, err = matching.ParsePublication(*pub)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "deltapub match: --pub: %v\n", err)
			return 2
		}
		ok, _, why := f.Explain(&p)
		if ok {
			fmt.Println("match")
			return 0
		}
		fmt.Println("no match")
		if *explain {
			fmt.Println(why)
		}
		return 1
	}
}
