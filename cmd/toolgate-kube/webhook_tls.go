package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certReloader serves the webhook's certificate and reads it again when
// its files change. A mounted Secret changes by an atomic swap of a
// symlink (cert-manager renews certificates weeks before they expire), so
// the files are looked at on each TLS handshake; a stat is cheap, and the
// API server keeps its connections open. A new pair that does not load
// (a half-written key) is logged and the last good one stays.
type certReloader struct {
	certFile, keyFile string
	logger            *slog.Logger

	mu    sync.Mutex
	cert  *tls.Certificate
	stamp string // size and modification time of both files
}

// newCertReloader loads the pair once; an error here stops the webhook.
func newCertReloader(certFile, keyFile string, logger *slog.Logger) (*certReloader, error) {
	c := &certReloader{certFile: certFile, keyFile: keyFile, logger: logger}
	stamp, err := c.stat()
	if err != nil {
		return nil, err
	}
	if err := c.load(stamp); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *certReloader) stat() (string, error) {
	var stamp string
	for _, f := range []string{c.certFile, c.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		stamp += fmt.Sprintf("%d/%d;", st.Size(), st.ModTime().UnixNano())
	}
	return stamp, nil
}

// load reads the pair; the caller holds mu, or is the constructor.
func (c *certReloader) load(stamp string) error {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("webhook certificate: %w", err)
	}
	c.cert, c.stamp = &cert, stamp
	return nil
}

// getCertificate is tls.Config.GetCertificate.
func (c *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	stamp, statErr := c.stat()
	c.mu.Lock()
	defer c.mu.Unlock()
	if statErr == nil && stamp != c.stamp {
		if err := c.load(stamp); err != nil {
			c.logger.Warn("keeping the last good webhook certificate", "err", err.Error())
			// Retry on the next handshake only when the files change again.
			c.stamp = stamp
		} else {
			c.logger.Info("webhook certificate reloaded", "not_after", c.cert.Leaf.NotAfter.Format(time.RFC3339))
		}
	}
	if c.cert == nil {
		return nil, errors.New("no webhook certificate")
	}
	return c.cert, nil
}
