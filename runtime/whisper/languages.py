"""ISO 639 codes of the languages Whisper's multilingual vocabulary knows, with English names.

Used to accept ``--language english`` as well as ``--language en`` and to print detected
languages by name. The vocabulary itself (``<|xx|>`` tokens) is the authority on which codes
a model supports.
"""

LANGUAGE_NAMES: dict[str, str] = dict(
    en="english", zh="chinese", de="german", es="spanish", ru="russian", ko="korean",
    fr="french", ja="japanese", pt="portuguese", tr="turkish", pl="polish", ca="catalan",
    nl="dutch", ar="arabic", sv="swedish", it="italian", id="indonesian", hi="hindi",
    fi="finnish", vi="vietnamese", he="hebrew", uk="ukrainian", el="greek", ms="malay",
    cs="czech", ro="romanian", da="danish", hu="hungarian", ta="tamil", no="norwegian",
    th="thai", ur="urdu", hr="croatian", bg="bulgarian", lt="lithuanian", la="latin",
    mi="maori", ml="malayalam", cy="welsh", sk="slovak", te="telugu", fa="persian",
    lv="latvian", bn="bengali", sr="serbian", az="azerbaijani", sl="slovenian", kn="kannada",
    et="estonian", mk="macedonian", br="breton", eu="basque", is_="icelandic", hy="armenian",
    ne="nepali", mn="mongolian", bs="bosnian", kk="kazakh", sq="albanian", sw="swahili",
    gl="galician", mr="marathi", pa="punjabi", si="sinhala", km="khmer", sn="shona",
    yo="yoruba", so="somali", af="afrikaans", oc="occitan", ka="georgian", be="belarusian",
    tg="tajik", sd="sindhi", gu="gujarati", am="amharic", yi="yiddish", lo="lao", uz="uzbek",
    fo="faroese", ht="haitian creole", ps="pashto", tk="turkmen", nn="nynorsk", mt="maltese",
    sa="sanskrit", lb="luxembourgish", my="myanmar", bo="tibetan", tl="tagalog",
    mg="malagasy", as_="assamese", tt="tatar", haw="hawaiian", ln="lingala", ha="hausa",
    ba="bashkir", jw="javanese", su="sundanese", yue="cantonese",
)
# "is" and "as" are Python keywords: spelled with a trailing underscore above.
LANGUAGE_NAMES = {k.rstrip("_"): v for k, v in LANGUAGE_NAMES.items()}

TO_LANGUAGE_CODE: dict[str, str] = {name: code for code, name in LANGUAGE_NAMES.items()}
TO_LANGUAGE_CODE.update({"burmese": "my", "valencian": "ca", "flemish": "nl",
                         "haitian": "ht", "letzeburgesch": "lb", "pushto": "ps",
                         "panjabi": "pa", "moldavian": "ro", "moldovan": "ro",
                         "sinhalese": "si", "castilian": "es", "mandarin": "zh"})
