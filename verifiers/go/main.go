// Command tlogcheck checks what a research-ledger server publishes with the Go reference
// implementation of the transparency-log formats (golang.org/x/mod/sumdb/note and
// golang.org/x/mod/sumdb/tlog), none of whose code this project wrote.
//
// It opens the server's GET /checkpoint note under the log's verifier key (and a witness's,
// given -witness), reads the tree through the C2SP hash tiles under GET /tile/..., which
// tlog checks against the signed root, proves and checks inclusion of leaves read from the
// entry bundles, checks the server's consistency proof from an earlier checkpoint (-old), and,
// given -bundle, checks every inclusion proof of an export bundle and every checkpoint,
// rotation and cosignature of its checkpoint log as notes.
//
// Build without modules: GO111MODULE=off GOPATH=/usr/share/gocode go build ./verifiers/go
package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

func main() {
	url := flag.String("url", "", "the server, e.g. http://127.0.0.1:7878")
	vkey := flag.String("vkey", "", "the log's verifier key, as `key show` prints it")
	witness := flag.String("witness", "", "a witness verifier key (type 0x04) whose cosignature is required")
	old := flag.String("old", "", "a checkpoint note saved earlier: check the consistency proof from it")
	bundle := flag.String("bundle", "", "an export bundle to check")
	flag.Parse()
	if err := run(*url, *vkey, *witness, *old, *bundle); err != nil {
		fmt.Println("FAILED:", err)
		os.Exit(1)
	}
}

func run(url, vkey, witness, old, bundle string) error {
	logVerifier, err := note.NewVerifier(vkey)
	if err != nil {
		return fmt.Errorf("the log's verifier key: %w", err)
	}
	verifiers := []note.Verifier{logVerifier}
	if witness != "" {
		w, err := newCosignatureVerifier(witness)
		if err != nil {
			return fmt.Errorf("the witness's verifier key: %w", err)
		}
		verifiers = append(verifiers, w)
	}
	if url != "" {
		if err := checkServer(url, logVerifier, verifiers, witness != "", old); err != nil {
			return err
		}
	}
	if bundle != "" {
		if err := checkBundle(bundle, vkey, witness); err != nil {
			return fmt.Errorf("bundle: %w", err)
		}
	}
	return nil
}

func get(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, body)
	}
	return body, nil
}

// checkpoint is the C2SP checkpoint body: origin, size, root, then extension lines.
type checkpoint struct {
	origin string
	size   int64
	root   tlog.Hash
}

func parseCheckpoint(text string) (checkpoint, error) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) < 3 {
		return checkpoint{}, errors.New("a checkpoint has at least three lines")
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 {
		return checkpoint{}, fmt.Errorf("bad tree size %q", lines[1])
	}
	root, err := tlog.ParseHash(lines[2])
	if err != nil {
		return checkpoint{}, fmt.Errorf("bad root %q", lines[2])
	}
	return checkpoint{lines[0], size, root}, nil
}

func openCheckpoint(msg []byte, origin string, verifiers []note.Verifier, needWitness bool) (checkpoint, error) {
	n, err := note.Open(msg, note.VerifierList(verifiers...))
	if err != nil {
		return checkpoint{}, fmt.Errorf("note.Open: %w", err)
	}
	signers := map[string]bool{}
	for _, s := range n.Sigs {
		signers[s.Name] = true
	}
	if !signers[origin] {
		return checkpoint{}, errors.New("the log's signature did not verify")
	}
	if needWitness && len(signers) < 2 {
		return checkpoint{}, errors.New("no verified witness cosignature")
	}
	c, err := parseCheckpoint(n.Text)
	if err != nil {
		return checkpoint{}, err
	}
	if c.origin != origin {
		return checkpoint{}, fmt.Errorf("origin %q is not the key's name %q", c.origin, origin)
	}
	return c, nil
}

// tileReader reads C2SP tiles (tile/<L>/<N>[.p/<W>]) where Go's tlog names them
// tile/<H>/<L>/<N>[.p/<W>]: the same tiles, with the height 8 in the path.
type tileReader struct{ url string }

func (r tileReader) Height() int { return 8 }

func (r tileReader) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, t := range tiles {
		path := strings.TrimPrefix(t.Path(), "tile/8/")
		data, err := get(r.url + "/tile/" + path)
		if err != nil {
			return nil, err
		}
		out[i] = data
	}
	return out, nil
}

func (r tileReader) SaveTiles([]tlog.Tile, [][]byte) {}

func checkServer(url string, logVerifier note.Verifier, verifiers []note.Verifier, needWitness bool, old string) error {
	msg, err := get(url + "/checkpoint")
	if err != nil {
		return err
	}
	c, err := openCheckpoint(msg, logVerifier.Name(), verifiers, needWitness)
	if err != nil {
		return fmt.Errorf("GET /checkpoint: %w", err)
	}
	fmt.Printf("OK: note.Open verified the checkpoint of %s at size %d\n", c.origin, c.size)
	reader := tlog.TileHashReader(tlog.Tree{N: c.size, Hash: c.root}, tileReader{url})
	th, err := tlog.TreeHash(c.size, reader)
	if err != nil {
		return fmt.Errorf("tlog.TreeHash from the tiles: %w", err)
	}
	if th != c.root {
		return fmt.Errorf("the tiles give root %v, the checkpoint signs %v", th, c.root)
	}
	fmt.Println("OK: the tiles hash to the signed root")
	for _, i := range []int64{0, c.size / 2, c.size - 1} {
		if err := checkLeaf(url, reader, c, i); err != nil {
			return fmt.Errorf("leaf %d: %w", i, err)
		}
	}
	fmt.Println("OK: tlog.CheckRecord accepts inclusion proofs built from the tiles for entry-bundle leaves")
	if old != "" {
		return checkGrowth(url, old, logVerifier, reader, c)
	}
	return nil
}

// checkLeaf reads the event hash of leaf i from its entry bundle and proves it in the tree.
func checkLeaf(url string, reader tlog.HashReader, c checkpoint, i int64) error {
	n := i / 256
	w := c.size - n*256
	path := tlog.Tile{H: 8, L: 0, N: n, W: 256}.Path()
	if w < 256 {
		path = tlog.Tile{H: 8, L: 0, N: n, W: int(w)}.Path()
	}
	data, err := get(url + "/tile/entries/" + strings.TrimPrefix(path, "tile/8/0/"))
	if err != nil {
		return err
	}
	at := (i % 256) * 34
	if int64(len(data)) < at+34 || binary.BigEndian.Uint16(data[at:]) != 32 {
		return errors.New("the entry bundle does not hold the leaf")
	}
	leaf := tlog.RecordHash(data[at+2 : at+34])
	proof, err := tlog.ProveRecord(c.size, i, reader)
	if err != nil {
		return err
	}
	return tlog.CheckRecord(proof, c.size, c.root, i, leaf)
}

// checkGrowth checks the server's consistency proof, and one tlog builds from the tiles, from
// the tree of a note saved earlier to today's.
func checkGrowth(url, old string, logVerifier note.Verifier, reader tlog.HashReader, c checkpoint) error {
	msg, err := os.ReadFile(old)
	if err != nil {
		return err
	}
	o, err := openCheckpoint(msg, logVerifier.Name(), []note.Verifier{logVerifier}, false)
	if err != nil {
		return fmt.Errorf("the saved checkpoint: %w", err)
	}
	fromTiles, err := tlog.ProveTree(c.size, o.size, reader)
	if err != nil {
		return err
	}
	if err := tlog.CheckTree(fromTiles, c.size, c.root, o.size, o.root); err != nil {
		return fmt.Errorf("tlog.CheckTree on the tiles' proof: %w", err)
	}
	body, err := get(fmt.Sprintf("%s/v1/proofs/consistency?first=%d&second=%d", url, o.size, c.size))
	if err != nil {
		return err
	}
	var answer struct {
		Proof struct {
			Path []string `json:"path"`
		} `json:"proof"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return err
	}
	proof, err := hashes(answer.Proof.Path)
	if err != nil {
		return err
	}
	if err := tlog.CheckTree(proof, c.size, c.root, o.size, o.root); err != nil {
		return fmt.Errorf("tlog.CheckTree on the server's proof: %w", err)
	}
	fmt.Printf("OK: tlog.CheckTree: the tree of %d extends the saved tree of %d\n", c.size, o.size)
	return nil
}

func hashes(hexes []string) (tlog.TreeProof, error) {
	out := make(tlog.TreeProof, len(hexes))
	for i, h := range hexes {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != 32 {
			return nil, fmt.Errorf("bad hash %q", h)
		}
		copy(out[i][:], b)
	}
	return out, nil
}

// cosignatureVerifier checks C2SP tlog-cosignature v1 (type 0x04) signatures: a big-endian
// u64 timestamp, then Ed25519 over "cosignature/v1\ntime <T>\n" and the checkpoint body.
type cosignatureVerifier struct {
	name string
	hash uint32
	key  ed25519.PublicKey
}

func newCosignatureVerifier(vkey string) (*cosignatureVerifier, error) {
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		return nil, errors.New("not name+hash+key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 33 || raw[0] != 0x04 {
		return nil, errors.New("not a type 0x04 Ed25519 key")
	}
	h := sha256.Sum256(append([]byte(parts[0]+"\n"), raw...))
	id := binary.BigEndian.Uint32(h[:4])
	if fmt.Sprintf("%08x", id) != parts[1] {
		return nil, errors.New("the key hash does not match")
	}
	return &cosignatureVerifier{parts[0], id, ed25519.PublicKey(raw[1:])}, nil
}

func (v *cosignatureVerifier) Name() string    { return v.name }
func (v *cosignatureVerifier) KeyHash() uint32 { return v.hash }
func (v *cosignatureVerifier) Verify(msg, sig []byte) bool {
	if len(sig) != 72 {
		return false
	}
	t := binary.BigEndian.Uint64(sig[:8])
	signed := append([]byte(fmt.Sprintf("cosignature/v1\ntime %d\n", t)), msg...)
	return ed25519.Verify(v.key, signed, sig[8:])
}

type bundleCheckpoint struct {
	Origin    string `json:"origin"`
	TreeSize  int64  `json:"tree_size"`
	Root      string `json:"root"`
	Time      string `json:"time"`
	Signature string `json:"signature"`
}

type entry struct {
	Entry        string `json:"entry"`
	PublicKey    string `json:"public_key"`
	Origin       string `json:"origin"`
	TreeSize     int64  `json:"tree_size"`
	Root         string `json:"root"`
	Time         string `json:"time"`
	Signature    string `json:"signature"`
	NewPublicKey string `json:"new_public_key"`
	Witness      string `json:"witness"`
	Timestamp    uint64 `json:"timestamp"`
}

// body rebuilds a checkpoint body from the JSON the ledger keeps, as docs/ledger-format.md says.
func body(origin string, size int64, rootHex, time string) (string, error) {
	root, err := hex.DecodeString(rootHex)
	if err != nil || len(root) != 32 {
		return "", fmt.Errorf("bad root %q", rootHex)
	}
	return fmt.Sprintf("%s\n%d\n%s\ntime %s\n", origin, size, base64.StdEncoding.EncodeToString(root), time), nil
}

// signedNote is a note of text signed with an Ed25519 signature (given in hex) by key.
func signedNote(text string, name string, key []byte, sigHex string) ([]byte, note.Verifier, error) {
	sig, err := hex.DecodeString(sigHex)
	if err != nil {
		return nil, nil, err
	}
	vkey, err := note.NewEd25519VerifierKey(name, ed25519.PublicKey(key))
	if err != nil {
		return nil, nil, err
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, nil, err
	}
	var id [4]byte
	binary.BigEndian.PutUint32(id[:], v.KeyHash())
	line := fmt.Sprintf("\u2014 %s %s\n", name, base64.StdEncoding.EncodeToString(append(id[:], sig...)))
	return []byte(text + "\n" + line), v, nil
}

func checkBundle(path, vkey, witness string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var b struct {
		Checkpoint    bundleCheckpoint `json:"checkpoint"`
		CheckpointLog []entry          `json:"checkpoint_log"`
		Events        []struct {
			Seq   int64    `json:"seq"`
			Hash  string   `json:"hash"`
			Proof []string `json:"proof"`
		} `json:"events"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return err
	}
	root, err := hashes([]string{b.Checkpoint.Root})
	if err != nil {
		return err
	}
	for _, e := range b.Events {
		h, err := hex.DecodeString(e.Hash)
		if err != nil {
			return err
		}
		proof, err := hashes(e.Proof)
		if err != nil {
			return err
		}
		if err := tlog.CheckRecord(tlog.RecordProof(proof), b.Checkpoint.TreeSize, root[0], e.Seq, tlog.RecordHash(h)); err != nil {
			return fmt.Errorf("event %d: tlog.CheckRecord: %w", e.Seq, err)
		}
	}
	fmt.Printf("OK: tlog.CheckRecord accepts the inclusion proofs of all %d events of the bundle\n", len(b.Events))
	return checkLog(b.CheckpointLog, vkey, witness)
}

// checkLog opens every checkpoint of the log as a note under the key in force, every rotation
// under the key it hands over from, and every cosignature of the given witness.
func checkLog(log []entry, vkey, witness string) error {
	var key []byte
	var cw *cosignatureVerifier
	if witness != "" {
		var err error
		if cw, err = newCosignatureVerifier(witness); err != nil {
			return err
		}
	}
	checkpoints, rotations, cosignatures := 0, 0, 0
	for i, e := range log {
		switch e.Entry {
		case "key_introduced":
			k, err := hex.DecodeString(e.PublicKey)
			if err != nil {
				return err
			}
			key = k
		case "checkpoint", "rotation":
			text, err := body(e.Origin, e.TreeSize, e.Root, e.Time)
			if err != nil {
				return err
			}
			var next []byte
			if e.Entry == "rotation" {
				next, err = hex.DecodeString(e.NewPublicKey)
				if err != nil {
					return err
				}
				nv, err := note.NewEd25519VerifierKey(e.Origin, ed25519.PublicKey(next))
				if err != nil {
					return err
				}
				text += "rotate-to " + nv + "\n"
			}
			msg, v, err := signedNote(text, e.Origin, key, e.Signature)
			if err != nil {
				return err
			}
			if _, err := note.Open(msg, note.VerifierList(v)); err != nil {
				return fmt.Errorf("checkpoint log entry %d (%s): note.Open: %w", i+1, e.Entry, err)
			}
			if next != nil {
				key = next
				rotations++
			} else {
				checkpoints++
			}
		case "cosignature":
			if cw == nil || e.Witness != witness {
				continue
			}
			text, err := body(e.Origin, e.TreeSize, e.Root, e.Time)
			if err != nil {
				return err
			}
			sig, err := hex.DecodeString(e.Signature)
			if err != nil {
				return err
			}
			var prefix [12]byte
			binary.BigEndian.PutUint32(prefix[:4], cw.hash)
			binary.BigEndian.PutUint64(prefix[4:], e.Timestamp)
			line := fmt.Sprintf("\u2014 %s %s\n", cw.name, base64.StdEncoding.EncodeToString(append(prefix[:], sig...)))
			if _, err := note.Open([]byte(text+"\n"+line), note.VerifierList(cw)); err != nil {
				return fmt.Errorf("checkpoint log entry %d (cosignature): note.Open: %w", i+1, err)
			}
			cosignatures++
		}
	}
	if vkey != "" && key != nil {
		v, err := note.NewVerifier(vkey)
		if err != nil {
			return err
		}
		cur, err := note.NewEd25519VerifierKey(v.Name(), ed25519.PublicKey(key))
		if err != nil {
			return err
		}
		if !bytes.Equal([]byte(cur), []byte(vkey)) {
			return fmt.Errorf("the chain of keys ends at %s, not at the key given", cur)
		}
	}
	if cw != nil && cosignatures == 0 {
		return errors.New("no cosignature by the witness in the checkpoint log")
	}
	fmt.Printf("OK: note.Open verified %d checkpoints, %d rotations and %d cosignatures of the checkpoint log\n", checkpoints, rotations, cosignatures)
	return nil
}
