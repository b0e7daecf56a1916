// Command mkimage writes an OCI image layout (oci-layout, index.json, blobs/sha256) from
// directory trees, one gzip layer per tree, reproducibly: entries in lexical order, every
// mtime the same (-mtime), owner 0:0 unless -own says otherwise, no user/group names, gzip
// without a timestamp, so the same trees give the same digests. Modes are kept as they are
// on disk, setuid/setgid/sticky bits included; hard links within a tree stay hard links.
//
//	mkimage -out DIR -ref NAME:TAG [-base LAYOUT] [-entrypoint JSON] [-cmd JSON]
//	        [-user U] [-workdir D] [-env K=V]... [-expose 80/tcp]... [-stop-signal S]
//	        [-own PATH=UID:GID]... [-mtime UNIX] [TREE...]
//
// -base starts from another layout's image: its layers (blobs hard-linked) and config, which
// the flags given then change (a Dockerfile's FROM). -ref is recorded as the index's
// org.opencontainers.image.ref.name annotation, the name `kaji lab image push` reads.
// The layout is written next to DIR and renamed over it, so DIR is never half-written.
// Standard library only (the conformance module's go.mod stays as the suite needs it).
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	refName       = "org.opencontainers.image.ref.name"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

// The image config, as much of it as kubelets read (the OCI image spec's fields).
type imageConfig struct {
	Created      string          `json:"created,omitempty"`
	Architecture string          `json:"architecture"`
	OS           string          `json:"os"`
	Config       containerConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

type containerConfig struct {
	User         string              `json:"User,omitempty"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts,omitempty"`
	Env          []string            `json:"Env,omitempty"`
	Entrypoint   []string            `json:"Entrypoint,omitempty"`
	Cmd          []string            `json:"Cmd,omitempty"`
	WorkingDir   string              `json:"WorkingDir,omitempty"`
	StopSignal   string              `json:"StopSignal,omitempty"`
}

// A flag that remembers whether it was given.
type optString struct {
	set bool
	val string
}

func (o *optString) String() string     { return o.val }
func (o *optString) Set(v string) error { o.set, o.val = true, v; return nil }

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

type owner struct{ uid, gid int }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		out, ref, base                          string
		entrypoint, cmd, user, workdir, stopSig optString
		env, expose, own                        list
		mtime                                   int64
	)
	flag.StringVar(&out, "out", "", "the OCI layout directory to write (replaced)")
	flag.StringVar(&ref, "ref", "", "name:tag recorded as org.opencontainers.image.ref.name")
	flag.StringVar(&base, "base", "", "an OCI layout whose image this one extends")
	flag.Var(&entrypoint, "entrypoint", `Entrypoint as a JSON array ("[]" clears it)`)
	flag.Var(&cmd, "cmd", `Cmd as a JSON array ("[]" clears it)`)
	flag.Var(&user, "user", "User (uid[:gid] or name)")
	flag.Var(&workdir, "workdir", "WorkingDir")
	flag.Var(&stopSig, "stop-signal", "StopSignal (e.g. SIGQUIT)")
	flag.Var(&env, "env", "KEY=VALUE, replacing KEY's value from -base (repeatable)")
	flag.Var(&expose, "expose", "an exposed port, 80/tcp (repeatable)")
	flag.Var(&own, "own", "PATH=UID:GID: owner of that entry of a tree (default 0:0; repeatable)")
	flag.Int64Var(&mtime, "mtime", 0, "mtime of every entry and the config's created time (Unix seconds)")
	flag.Parse()
	if out == "" || ref == "" {
		return errors.New("-out and -ref are required")
	}
	owners := map[string]owner{}
	for _, o := range own {
		p, ids, ok := strings.Cut(o, "=")
		u, g, ok2 := strings.Cut(ids, ":")
		uid, err1 := strconv.Atoi(u)
		gid, err2 := strconv.Atoi(g)
		if !ok || !ok2 || err1 != nil || err2 != nil {
			return fmt.Errorf("-own %q: want PATH=UID:GID", o)
		}
		owners[strings.Trim(p, "/")] = owner{uid, gid}
	}

	out = filepath.Clean(out)
	tmp := out + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	blobs := filepath.Join(tmp, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return err
	}

	cfg := imageConfig{Architecture: "amd64", OS: "linux"}
	var layers []descriptor
	if base != "" {
		var err error
		if cfg, layers, err = readBase(base, blobs); err != nil {
			return fmt.Errorf("base %s: %w", base, err)
		}
	}
	if mtime != 0 || cfg.Created == "" {
		cfg.Created = time.Unix(mtime, 0).UTC().Format(time.RFC3339)
	}
	cfg.RootFS.Type = "layers"
	for _, tree := range flag.Args() {
		desc, diffID, err := writeLayer(tree, blobs, owners, mtime)
		if err != nil {
			return fmt.Errorf("layer %s: %w", tree, err)
		}
		layers = append(layers, desc)
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, diffID)
	}
	if len(layers) == 0 {
		return errors.New("no layers: give a tree or -base")
	}

	c := &cfg.Config
	for _, a := range []struct {
		opt *optString
		dst *[]string
	}{{&entrypoint, &c.Entrypoint}, {&cmd, &c.Cmd}} {
		if a.opt.set {
			var v []string
			if err := json.Unmarshal([]byte(a.opt.val), &v); err != nil {
				return fmt.Errorf("%q is not a JSON array of strings: %w", a.opt.val, err)
			}
			*a.dst = v
		}
	}
	for opt, dst := range map[*optString]*string{&user: &c.User, &workdir: &c.WorkingDir, &stopSig: &c.StopSignal} {
		if opt.set {
			*dst = opt.val
		}
	}
	for _, kv := range env {
		key, _, _ := strings.Cut(kv, "=")
		replaced := false
		for i, old := range c.Env {
			if strings.HasPrefix(old, key+"=") {
				c.Env[i], replaced = kv, true
			}
		}
		if !replaced {
			c.Env = append(c.Env, kv)
		}
	}
	for _, p := range expose {
		if c.ExposedPorts == nil {
			c.ExposedPorts = map[string]struct{}{}
		}
		c.ExposedPorts[p] = struct{}{}
	}

	cfgDesc, err := writeJSON(blobs, mediaConfig, cfg)
	if err != nil {
		return err
	}
	manDesc, err := writeJSON(blobs, mediaManifest, manifest{SchemaVersion: 2, MediaType: mediaManifest, Config: cfgDesc, Layers: layers})
	if err != nil {
		return err
	}
	manDesc.Annotations = map[string]string{refName: ref}
	manDesc.Platform = &platform{Architecture: cfg.Architecture, OS: cfg.OS}
	if err := writeFile(filepath.Join(tmp, "index.json"), index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []descriptor{manDesc}}); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	var size int64
	for _, l := range layers {
		size += l.Size
	}
	fmt.Printf("%s %s %d layer(s), %.1f MiB compressed\n", ref, manDesc.Digest, len(layers), float64(size)/(1<<20))
	return nil
}

// readBase returns the base image's config and layer descriptors, its layer blobs linked
// (or copied) into blobs.
func readBase(dir, blobs string) (imageConfig, []descriptor, error) {
	var cfg imageConfig
	var idx index
	if err := readJSON(filepath.Join(dir, "index.json"), &idx); err != nil {
		return cfg, nil, err
	}
	if len(idx.Manifests) == 0 {
		return cfg, nil, errors.New("index.json lists no image")
	}
	var man manifest
	if err := readJSON(blobPath(dir, idx.Manifests[0].Digest), &man); err != nil {
		return cfg, nil, err
	}
	if err := readJSON(blobPath(dir, man.Config.Digest), &cfg); err != nil {
		return cfg, nil, err
	}
	for _, l := range man.Layers {
		src, dst := blobPath(dir, l.Digest), filepath.Join(blobs, strings.TrimPrefix(l.Digest, "sha256:"))
		if err := os.Link(src, dst); err != nil {
			if err := copyFile(src, dst); err != nil {
				return cfg, nil, err
			}
		}
	}
	return cfg, man.Layers, nil
}

func blobPath(layout, digest string) string {
	return filepath.Join(layout, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func writeFile(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// writeJSON stores v as a blob and returns its descriptor.
func writeJSON(blobs, media string, v any) (descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return descriptor{}, err
	}
	sum := sha256.Sum256(b)
	hexSum := hex.EncodeToString(sum[:])
	if err := os.WriteFile(filepath.Join(blobs, hexSum), b, 0o644); err != nil {
		return descriptor{}, err
	}
	return descriptor{MediaType: media, Digest: "sha256:" + hexSum, Size: int64(len(b))}, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	o, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(o, in); err != nil {
		o.Close()
		return err
	}
	return o.Close()
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeLayer packs tree as a gzip tar blob; returns its descriptor and diff ID (the digest of
// the uncompressed tar).
func writeLayer(tree, blobs string, owners map[string]owner, mtime int64) (descriptor, string, error) {
	f, err := os.CreateTemp(blobs, ".layer-")
	if err != nil {
		return descriptor{}, "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	compressed := sha256.New()
	counted := &countingWriter{w: io.MultiWriter(f, compressed)}
	zw, err := gzip.NewWriterLevel(counted, gzip.DefaultCompression)
	if err != nil {
		return descriptor{}, "", err
	}
	uncompressed := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(zw, uncompressed))
	if err := packTree(tw, tree, owners, time.Unix(mtime, 0)); err != nil {
		return descriptor{}, "", err
	}
	if err := tw.Close(); err != nil {
		return descriptor{}, "", err
	}
	if err := zw.Close(); err != nil {
		return descriptor{}, "", err
	}
	if err := f.Close(); err != nil {
		return descriptor{}, "", err
	}
	hexSum := hex.EncodeToString(compressed.Sum(nil))
	if err := os.Rename(f.Name(), filepath.Join(blobs, hexSum)); err != nil {
		return descriptor{}, "", err
	}
	desc := descriptor{MediaType: mediaLayer, Digest: "sha256:" + hexSum, Size: counted.n}
	return desc, "sha256:" + hex.EncodeToString(uncompressed.Sum(nil)), nil
}

// packTree writes every entry under root (not root itself), parents before children, names
// in byte order.
func packTree(tw *tar.Writer, root string, owners map[string]owner, mtime time.Time) error {
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	var walk func(rel string) error
	walk = func(rel string) error {
		entries, err := os.ReadDir(filepath.Join(root, rel))
		if err != nil {
			return err
		}
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		for _, name := range names {
			p := name
			if rel != "" {
				p = rel + "/" + name
			}
			full := filepath.Join(root, p)
			fi, err := os.Lstat(full)
			if err != nil {
				return err
			}
			st := fi.Sys().(*syscall.Stat_t)
			o := owners[p]
			h := &tar.Header{
				Name:    p,
				Mode:    int64(st.Mode & 0o7777),
				Uid:     o.uid,
				Gid:     o.gid,
				ModTime: mtime,
			}
			switch fi.Mode().Type() {
			case fs.ModeDir:
				h.Typeflag, h.Name = tar.TypeDir, p+"/"
			case fs.ModeSymlink:
				h.Typeflag = tar.TypeSymlink
				if h.Linkname, err = os.Readlink(full); err != nil {
					return err
				}
			case 0:
				key := inode{uint64(st.Dev), st.Ino}
				if first, ok := seen[key]; ok && st.Nlink > 1 {
					h.Typeflag, h.Linkname = tar.TypeLink, first
				} else {
					seen[key] = p
					h.Typeflag, h.Size = tar.TypeReg, fi.Size()
				}
			default:
				return fmt.Errorf("%s: unsupported file type %v", full, fi.Mode().Type())
			}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if h.Typeflag == tar.TypeReg {
				if err := copyInto(tw, full); err != nil {
					return err
				}
			}
			if h.Typeflag == tar.TypeDir {
				if err := walk(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk("")
}

func copyInto(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
