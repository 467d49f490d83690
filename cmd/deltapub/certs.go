package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/deltapub/deltapub/internal/quic"
)

const certsAbout = `Makes an overlay CA (reused if DIR/ca.pem and DIR/ca-key.pem exist, DIR
being --dir) and a certificate per broker of --brokers signed by it. Give
each broker tls cert_file/key_file = DIR/ID.pem, DIR/ID-key.pem and
ca_file = DIR/ca.pem; brokers then accept only links from holders of such
certificates.
`

func certsCmd(fs *flag.FlagSet) func([]string) int {
	dir := fs.String("dir", "certs", "directory to write ca.pem, ca-key.pem and ID.pem, ID-key.pem per broker")
	brokers := fs.String("brokers", "", "comma-separated broker IDs to make certificates for (e.g. B1,B2,B3)")
	days := fs.Int("days", 365, "validity in days")
	return func([]string) int {
		if *brokers == "" || *days <= 0 {
			fmt.Fprintln(os.Stderr, "deltapub certs: --brokers is required and --days must be > 0")
			return 2
		}
		if err := quic.MakeCerts(*dir, strings.Split(*brokers, ","), time.Duration(*days)*24*time.Hour, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
}
