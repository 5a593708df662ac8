"""The release store on a device: objects, releases and what runs (the one activation path SSH deploys and the
Mender module share), the lease, the trial, verification and trust, the store's command line (`python -m sdk store`)."""
