//! The crate's error type.

use std::fmt;

/// Everything that can go wrong building, loading, selecting or discovering
/// a topology. Messages name the file (when there is one), the field and
/// the problem: `dgx.toml: links[3].kind: unknown link kind "pcie9"`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopoError {
    /// A field has a bad value (unknown kind, missing node, negative
    /// bandwidth, duplicate id, unsupported version...).
    #[error("{}{field}: {problem}", FilePrefix(file.as_deref()))]
    Invalid {
        /// The file, when the topology came from one.
        file: Option<String>,
        /// The field, as a path: `links[3].kind`, `nodes[0].id`, `version`.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// The file is not valid TOML / JSON, or does not have the expected shape.
    #[error("{file}: not a valid {format} topology file: {problem}")]
    Syntax {
        /// The file.
        file: String,
        /// "TOML" or "JSON".
        format: &'static str,
        /// The parser's message (with line and column where it gives them).
        problem: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `select` got a name that is neither a preset nor an existing file.
    #[error("unknown topology {name:?}: not a preset (one of: {known}) and no such file")]
    UnknownTopology {
        /// What was asked for.
        name: String,
        /// The preset names.
        known: String,
    },
    /// Cluster or selection options that cannot be applied.
    #[error("{0}")]
    Options(String),
    /// An option that would change nothing on this topology (`--nic-speed`
    /// where there is no NIC to set it on): refused rather than ignored, so
    /// a command line that asks for it learns it was not applied.
    #[error("{0}")]
    NoEffect(String),
    /// No route exists between two nodes.
    #[error("no route from {from:?} to {to:?}")]
    NoRoute {
        /// Source node id.
        from: String,
        /// Destination node id.
        to: String,
    },
}

struct FilePrefix<'a>(Option<&'a str>);

impl fmt::Display for FilePrefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(file) => write!(f, "{file}: "),
            None => Ok(()),
        }
    }
}

impl TopoError {
    pub(crate) fn invalid(field: impl Into<String>, problem: impl Into<String>) -> Self {
        TopoError::Invalid {
            file: None,
            field: field.into(),
            problem: problem.into(),
        }
    }

    /// The file the message starts with, if any (a file's field, syntax or
    /// I/O error), so a caller that names its option does not name the
    /// file twice.
    ///
    /// ```
    /// let e = gpucomm_topo::select("/no/such/dir/", &Default::default()).unwrap_err();
    /// assert_eq!(e.file(), None); // unknown: neither a preset nor a file
    /// let e = gpucomm_topo::format::load(std::path::Path::new("/proc")).unwrap_err();
    /// assert_eq!(e.file(), Some("/proc"));
    /// assert!(e.to_string().starts_with("/proc: "));
    /// ```
    pub fn file(&self) -> Option<&str> {
        match self {
            TopoError::Invalid { file, .. } => file.as_deref(),
            TopoError::Syntax { file, .. } => Some(file),
            TopoError::Io { path, .. } => Some(path),
            _ => None,
        }
    }

    /// Attaches a file name to an `Invalid` error that has none.
    pub(crate) fn in_file(self, name: &str) -> Self {
        match self {
            TopoError::Invalid {
                file: None,
                field,
                problem,
            } => TopoError::Invalid {
                file: Some(name.to_string()),
                field,
                problem,
            },
            other => other,
        }
    }
}
