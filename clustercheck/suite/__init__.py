"""Suite files: what a suite may say (`spec`), reading one (`load`), and what its `env:` may set
(`envpolicy`)."""
