package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/deltapub/deltapub/checkpoint"
	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/message"
)

// failureTimeout is --failure-timeout: given, or 5 s for a client that
// can move to another broker (durable, or several brokers), else 0 (the
// transport's default).
func failureTimeout(flag time.Duration, moves bool) time.Duration {
	if flag == 0 && moves {
		return 5 * time.Second
	}
	return flag
}

// readState reads a durable subscription's checkpoint token from path:
// nil when path does not exist (a new subscription); an error when it is
// not a token of the subscription name.
func readState(path, name string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--state: %w", err)
	}
	t, err := checkpoint.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("--state %s: %w", path, err)
	}
	if t.Name != name {
		return nil, fmt.Errorf("--state %s: the token belongs to durable subscription %q, not %q", path, t.Name, name)
	}
	return b, nil
}

// writeState replaces path with tok atomically: a crash leaves the old
// token or the new one, never a mix (write, fsync, rename, fsync of the
// directory).
func writeState(path string, tok []byte) error {
	if tok == nil {
		return nil
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".deltapub-state-*")
	if err != nil {
		return fmt.Errorf("--state: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(tok)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("--state %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// printAndSave prints line, then stores tok (the token once that line is
// consumed) and acknowledges it: after a crash, what FILE says was
// consumed was printed.
func printAndSave(out *bufio.Writer, line []byte, path string, sub *client.Subscription, tok []byte) error {
	if _, err := out.Write(line); err != nil {
		return err
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if err := writeState(path, tok); err != nil {
		return err
	}
	return sub.Ack(tok)
}

// appendGapJSON appends a durable subscription's gap as one JSON line.
func appendGapJSON(b []byte, g *message.Gap) []byte {
	b = append(b, `{"gap":{"publisher":`...)
	b = appendJSONString(b, g.Source.Publisher)
	b = append(b, `,"epoch":`...)
	b = strconv.AppendUint(b, g.Source.Epoch, 10)
	b = append(b, `,"from":`...)
	b = strconv.AppendUint(b, g.From, 10)
	b = append(b, `,"to":`...)
	b = strconv.AppendUint(b, g.To, 10)
	b = append(b, `,"reason":`...)
	b = appendJSONString(b, g.Reason)
	return append(b, "}}\n"...)
}
