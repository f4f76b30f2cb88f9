"""The release family after upstream's refactor (SGLang 0.5.23): its sites, rules, inserted
code and fork tests. See ``families.py``."""
