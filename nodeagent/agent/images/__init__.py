"""Images on the node: references, pulls (skopeo), the content-addressed store on imagefs,
layer unpacking for overlayfs, pull policy and back-off, and image garbage collection.

    reference   image references, Docker Hub defaults (pure)
    policy      imagePullPolicy defaulting and the pull decision (pure)
    backoff     the image pull back-off, 10 s doubling to 300 s (pure, injectable clock)
    errors      what can go wrong, and the container state and event each shows (pure)
    gc          the kubelet's image GC policy and reclaim planning (pure)
    listing     status.images, a container's imageID and the API's image objects (pure)
    records     image records and OCI manifest/config parsing (pure)
    credentials registry credentials (imagePullSecrets and config, the kubelet's keyring) and transport security
    digest      hashing and checking blobs
    unpack      one layer into its own directory: tar safety, OCI -> overlayfs whiteouts
    skopeo      the Fetcher over skopeo (distribution API, oci and docker-archive transports)
    store       blobs, layers, records, leases on disk; atomic, crash-safe
    manager     ImageManager: ensure/pull/import/remove/lease, GC executor, reclaim

For the container runtime (next): `ImageManager.ensure()` gives an ImageRecord whose `config`
holds Entrypoint, Cmd, Env, WorkingDir and User; `ImageManager.lowerdirs(record)` its layer
directories top first for overlayfs `lowerdir=`; `lease(holder, record.id)` before the container
is created and `release(holder)` after it is removed keep GC and `rm` away from it.

May import: config, events, core. Nothing above (runtime, pods, eviction, api, daemon).
"""
