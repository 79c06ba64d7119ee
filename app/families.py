"""The keras.applications classifier families as plain data: the module whose preprocess_input each expects (what the
classifier's first layer must do) and the smallest input each accepts, read by config validation."""

from __future__ import annotations

from dataclasses import dataclass

KERAS_APP = "app.backbones.keras_app"  # the `_target_` of conf/model/keras_app.yaml


@dataclass(frozen=True)
class Family:
    module: str  # keras.applications.<module>: its preprocess_input is what the first layer equals
    # what the first layer does to RGB 0..255: "caffe" (BGR minus the ImageNet mean), "tf"
    # ([-1, 1]), "torch" ([0, 1], minus mean, over std), or "none": the backbone does it itself
    normalisation: str
    min_size: int = 32  # the smallest H and W the application accepts without its top


def _table() -> dict[str, Family]:
    groups = {
        Family("convnext", "none"): ["ConvNeXtTiny", "ConvNeXtSmall", "ConvNeXtBase", "ConvNeXtLarge",
                                     "ConvNeXtXLarge"],
        Family("densenet", "torch"): ["DenseNet121", "DenseNet169", "DenseNet201"],
        Family("efficientnet", "none"): [f"EfficientNetB{i}" for i in range(8)],
        Family("efficientnet_v2", "none"): ["EfficientNetV2B0", "EfficientNetV2B1", "EfficientNetV2B2",
                                            "EfficientNetV2B3", "EfficientNetV2S", "EfficientNetV2M",
                                            "EfficientNetV2L"],
        Family("inception_resnet_v2", "tf", 75): ["InceptionResNetV2"],
        Family("inception_v3", "tf", 75): ["InceptionV3"],
        Family("mobilenet", "tf"): ["MobileNet"],
        Family("mobilenet_v2", "tf"): ["MobileNetV2"],
        Family("mobilenet_v3", "none"): ["MobileNetV3Small", "MobileNetV3Large"],
        Family("nasnet", "tf"): ["NASNetMobile", "NASNetLarge"],
        Family("resnet", "caffe"): ["ResNet50", "ResNet101", "ResNet152"],
        Family("resnet_v2", "tf"): ["ResNet50V2", "ResNet101V2", "ResNet152V2"],
        Family("vgg16", "caffe"): ["VGG16"],
        Family("vgg19", "caffe"): ["VGG19"],
        Family("xception", "tf", 71): ["Xception"],
    }
    return {name: family for family, names in groups.items() for name in names}


FAMILIES = _table()
